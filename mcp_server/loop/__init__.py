"""The kernel-compass loop: profile → classify → select → propose → validate → accept or revert.

Every step leaves a record in the ledger (``mcp_server.ledger``), so a loop that is
interrupted resumes where it stopped and never re-tries a rejected proposal. The steps
are the engines the MCP tools run by default (``steps.default_steps``); the loop adds
nothing an agent calling the tools cannot do. See docs/ledger.md ("The loop").
"""
