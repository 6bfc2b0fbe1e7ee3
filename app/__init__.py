"""Faust processor: deduplicate replica copies, merge cells last-write-wins, emit change events."""
