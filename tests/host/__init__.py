"""The action host (issue 12; host-spec sections A-J, T)."""
