#!/usr/bin/env bash
# Checks that docs/configuration.md holds the reference the schema generates; with --fix,
# rewrites that part of the file. Usage: check-config-reference.sh SLUICE_BINARY [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
sluice=$1
doc=docs/configuration.md
# The generated part starts at the first section table; the prose above it is hand-written.
prose=$(sed -n '1,/^## `/p' "$doc" | sed '$d')
generated=$("$sluice" config reference | tail -n +2)
if [ "${2:-}" = "--fix" ]; then
  printf '%s\n%s\n' "$prose" "$generated" > "$doc"
  exit 0
fi
if ! diff <(printf '%s\n%s\n' "$prose" "$generated") "$doc"; then
  echo "$doc is out of date with the settings schema: run scripts/check-config-reference.sh $sluice --fix" >&2
  exit 1
fi
echo "$doc matches the schema"
