"""Delivery of a published package installation to target databases through the action host (issue 17;
ADRs 0055-0058). ``urls`` and ``drift`` are pure; scripts that manage their own transaction are found by
``catalog.script_control``, which the rehearsal uses too. ``target_db`` touches a target database only;
``lock`` reads the control store's publication and rehearsal evidence; ``targets`` and ``service`` are what
the CLI and the API call; ``action`` is the built-in ``fencepost.deliver`` action and its adapter."""
