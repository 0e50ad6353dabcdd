# Type stub of the Cython extension bkfast/_entrysource.pyx: what Python code calls.

class EntrySource:
    def get(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None: ...
