"""The experiment ledger: one SQLite file recording what the kernel-compass loop tried.

Records: experiment (target, git state, environment) → profile (ncu report and its
classification) → candidate (kernel, diagnosis, proposal, change) → validation (the
full validate_candidate result) → decision (accepted / reverted / abandoned, by whom,
why). ``store`` holds the schema and the transactions; ``engine`` the operations;
``export`` the markdown log a person reads. See docs/ledger.md.
"""
