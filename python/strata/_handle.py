"""What the binding's handle classes share (comm.py's Stream and Communicator, compress.py's
Compressor): the library's last error message and the base class releasing a C handle. Below
both modules, so neither imports the other for it."""

from . import _lib as L


def _last_error():
    msg = L.lib().strataGetLastError(None)
    return msg.decode("utf-8", "replace") if msg else ""


class _Handle:
    """A C handle (self._handle) released by destroy(): `with` blocks and garbage collection
    destroy it too (errors at collection are dropped)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            if getattr(self, "_handle", None) is not None:
                self.destroy()
        except Exception:
            pass
