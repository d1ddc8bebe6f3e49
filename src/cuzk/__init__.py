"""cuzk: a Groth16 proving daemon for circom/snarkjs circuits that lives within its memory limits."""


def __getattr__(name: str):
    # The installed distribution's version, read only when asked: importlib.metadata costs a one-shot prove ~10 ms.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("cuzk")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'cuzk' has no attribute {name!r}")
