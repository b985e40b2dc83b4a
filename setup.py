from setuptools import setup

# The C core is an out-of-line cffi module; all build details live in the builder.
setup(cffi_modules=["ml_comm/_build_ffi.py:ffibuilder"])
