"""SSD300, the first model the harness compares: its stages and tensor rules (spec), index meaning (layout) and
error model. Its reference, sides and scenarios still live in reference/ and parity/ (moving them here is open
work)."""
