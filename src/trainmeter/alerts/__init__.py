"""The alerts wing: rules over what the run detects, and what each does when it fires (show, notify, stop)."""
