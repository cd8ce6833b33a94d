// sluice-python: Debian's CPython with sluice's `_sluice` module built in (sluice_module.cpp
// registers it before the interpreter starts). It takes python3's command line, so that
// `mpirun -np 1 sluice train -c cfg.yaml : -np 2 sluice-python train.py` makes the script's
// process a model rank of the job (docs/python.md).
#include <Python.h>

int main(int argc, char** argv) { return Py_BytesMain(argc, argv); }
