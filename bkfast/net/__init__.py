"""Twisted networking: the bookie server (v2 + v3 on one port)."""
