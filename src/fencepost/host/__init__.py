"""The action host: leased action invocations, adapter steps, outcome verdicts and bounded recovery.

Seed: platform-host-8.1-readme-excerpt.md; requirements in host-spec.md (sections named in each module).
"""
