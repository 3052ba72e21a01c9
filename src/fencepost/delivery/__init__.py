"""Delivery of a published package installation to target databases through the action host (issue 17;
ADRs 0055-0058). Layers: ``scripts`` and ``urls`` are pure; ``target_db`` touches a target database only;
``lock`` and ``drift`` read the control store's publication and rehearsal evidence; ``targets`` and ``service``
are what the CLI and the API call; ``action`` is the built-in ``fencepost.deliver`` action and its adapter."""
