#!/bin/sh
# links_no_torch.sh BINARY...: fails when a binary loads libtorch or libc10, as the dynamic loader
# resolves its libraries (ldd: the NEEDED entries and theirs). The Python module and sluice-python
# must load none (docs/python.md, "Any torch"): a script brings its own torch, of any version.
status=0
for binary in "$@"; do
  if ! libraries=$(ldd "$binary"); then
    echo "ldd $binary failed"
    exit 1
  fi
  if ! echo "$libraries" | grep -q 'libmpi'; then
    echo "$binary: ldd lists no libmpi, so this is not the list of a sluice binary:"
    echo "$libraries"
    status=1
  fi
  if echo "$libraries" | grep -E 'lib(torch|c10)'; then
    echo "$binary loads libtorch (the lines above): it must link sluice_train, never sluice_model or sluice_torch_train"
    status=1
  else
    echo "$binary: no libtorch, no libc10 ($(echo "$libraries" | wc -l) libraries)"
  fi
done
exit $status
