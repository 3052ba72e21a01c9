"""Package publication, installation lifecycle and workflow planning/admission (the application service)."""
