"""Transactions (KIP-98, KIP-447, KIP-890): the coordinator's pure state machine (state.py), its
``__transaction_state`` records (log.py), the trio coordinator that stores state and writes
markers (coordinator.py, markers.py) and the request handlers (handlers.py)."""
