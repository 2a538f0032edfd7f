"""`testament` commands for people: put documents in and ask questions, over the gateway's
HTTP API (RememberStack's routes, and its Connect face for streams)."""
