"""Subcommands of the zyfa-asmgen command line, one module each (see `zyfa_asmgen.__main__`)."""
