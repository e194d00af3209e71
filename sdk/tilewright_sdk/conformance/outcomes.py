"""The words a case's outcome is reported with: skip reasons and summaries start with these
prefixes, and the plugin turns them into the report's statuses."""

UNSUPPORTED = "unsupported: "  # the backend does not declare what the case needs
UNAVAILABLE = "unavailable: "  # it does, but cannot run here
NOT_VERIFIED = "not verified: "  # generated or compiled, not run: nothing checked the result
