"""The one exception the Python runtime raises for every runtime error (a module of its own: the C++
extension imports it to raise it)."""


class EdgeshareError(RuntimeError):
    """A runtime call failed.

    Attributes:
      code: the runtime's Error name, e.g. "NotFound", "InvalidArgument", "InvalidProgram",
        "AccessFailed".
      message: the runtime's one-line message, naming the file, method, input or key at fault.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
