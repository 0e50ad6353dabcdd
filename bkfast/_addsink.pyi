# Type stub of the Cython extension bkfast/_addsink.pyx: what Python code calls.

MASTER_KEY_BYTES: int
TAKEN_ADD_BYTES: int

class AddSink:
    def take(self, ledger_id: int, entry_id: int, tag: int, master_key: bytes, entry: bytes) -> bool: ...
