#!/usr/bin/env bash
# Build sluice's built-in sample corpus: an LJSpeech-format corpus (plus a JSONL manifest) of
# English and Persian clips synthesised with espeak-ng from the sentences in data/sentences/.
# Nothing is downloaded. See data/README.md.
#
#   scripts/make-sample-corpus.sh OUT_DIR [--sample-rate HZ] [--jobs N] [--force]
#
# Output:
#   OUT_DIR/wavs/LJS-EN-0001.wav ...   mono, 16-bit PCM, 22050 Hz unless --sample-rate says otherwise
#   OUT_DIR/metadata.csv               LJSpeech rows: id|text|normalized_text (column 3 repeats the
#                                      raw text; sluice does its own normalisation)
#   OUT_DIR/manifest.jsonl             {"id","audio","text","speaker","language"} per line
#   OUT_DIR/.sluice-sample-corpus      marker: lets a rerun replace a corpus this script made
#
# Idempotent: if OUT_DIR already holds a complete corpus at the asked sample rate whose
# metadata.csv is newer than the sentence files and this script, nothing is done. Otherwise the
# corpus is built in a temporary directory beside OUT_DIR and renamed into place, so an
# interrupted run never leaves a half-built corpus at OUT_DIR.
set -euo pipefail

readonly PROG=make-sample-corpus
readonly SCRIPT="${BASH_SOURCE[0]}"
REPO_ROOT="$(cd "$(dirname "$SCRIPT")/.." && pwd)"
readonly REPO_ROOT
readonly SENTENCE_DIR="$REPO_ROOT/data/sentences"
readonly MARKER=.sluice-sample-corpus

readonly ESPEAK_WPM=175   # espeak-ng's default speed; every sentence lands in 3-7 s at this rate
readonly MIN_SECONDS=2
readonly MAX_SECONDS=10

# language | sentence file | id prefix | "voice=speaker" pairs, used in turn line by line
readonly LANGUAGES=(
  "en|$SENTENCE_DIR/en.txt|LJS-EN|en-us=espeak-en en-us+f3=espeak-en-f3"
  "fa|$SENTENCE_DIR/fa.txt|LJS-FA|fa=espeak-fa fa+f3=espeak-fa-f3"
)

log() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() {
  cat <<EOF
usage: scripts/make-sample-corpus.sh OUT_DIR [--sample-rate HZ] [--jobs N] [--force]

Builds the sample corpus (LJSpeech metadata.csv + wavs/ + manifest.jsonl) from
data/sentences/*.txt with espeak-ng.

  --sample-rate HZ  output sample rate (default 22050, espeak-ng's native rate;
                    other rates are resampled with sox)
  --jobs N          parallel synthesis jobs (default: nproc)
  --force           rebuild even if OUT_DIR is up to date
EOF
}

# ---------------------------------------------------------------------------- arguments
out_arg=""
sample_rate=22050
jobs="$(nproc 2>/dev/null || echo 1)"
force=0
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --sample-rate) (($# >= 2)) || die "--sample-rate needs a value"; sample_rate="$2"; shift 2 ;;
    --sample-rate=*) sample_rate="${1#*=}"; shift ;;
    --jobs) (($# >= 2)) || die "--jobs needs a value"; jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --force) force=1; shift ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) [[ -z "$out_arg" ]] || { usage >&2; die "more than one OUT_DIR given"; }; out_arg="$1"; shift ;;
  esac
done
[[ -n "$out_arg" ]] || { usage >&2; die "OUT_DIR is required"; }
if ! [[ "$sample_rate" =~ ^[1-9][0-9]*$ ]] || ((sample_rate < 8000 || sample_rate > 192000)); then
  die "--sample-rate must be an integer in 8000..192000, got '$sample_rate'"
fi
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$jobs'"

for tool in espeak-ng sox soxi xargs; do
  command -v "$tool" >/dev/null || die "'$tool' not found (Debian: apt-get install espeak-ng sox)"
done

# Resolve OUT_DIR to an absolute path without requiring it to exist.
out_arg="${out_arg%/}"
[[ -n "$out_arg" ]] || die "refusing to use / as OUT_DIR"
out_parent="$(dirname -- "$out_arg")"
out_name="$(basename -- "$out_arg")"
[[ "$out_name" != "." && "$out_name" != ".." ]] || die "OUT_DIR must name a directory, got '$out_arg'"
mkdir -p -- "$out_parent"
out_parent="$(cd -- "$out_parent" && pwd)"
readonly OUT_DIR="$out_parent/$out_name"
[[ ! -e "$OUT_DIR" || -d "$OUT_DIR" ]] || die "$OUT_DIR exists and is not a directory"

# ---------------------------------------------------------------------------- sentences
# Every line of a sentence file is one clip; line N becomes id PREFIX-000N, so ids stay stable.
# Read all sentences into parallel arrays.
ids=() langs=() voices=() speakers=() texts=() files=()
for entry in "${LANGUAGES[@]}"; do
  IFS='|' read -r lang file prefix pairs <<<"$entry"
  [[ -f "$file" ]] || die "sentence file missing: $file"
  read -r -a pair_list <<<"$pairs"
  files+=("$file")
  n=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    n=$((n + 1))
    where="${file#"$REPO_ROOT"/}:$n"
    [[ "$line" != *$'\r'* ]] || die "$where: carriage return (use LF line endings)"
    [[ "$line" != *'|'* ]] || die "$where: '|' is the LJSpeech column separator and may not appear"
    [[ "$line" != *$'\t'* ]] || die "$where: tab character"
    [[ "$line" =~ [^[:space:]] ]] || die "$where: blank line (every line is one clip)"
    [[ "$line" != [[:space:]]* && "$line" != *[[:space:]] ]] || die "$where: leading/trailing whitespace"
    pair="${pair_list[$(((n - 1) % ${#pair_list[@]}))]}"
    ids+=("$(printf '%s-%04d' "$prefix" "$n")")
    langs+=("$lang")
    voices+=("${pair%%=*}")
    speakers+=("${pair#*=}")
    texts+=("$line")
  done <"$file"
  ((n > 0)) || die "no sentences in $file"
done
readonly total=${#ids[@]}

# ---------------------------------------------------------------------------- up-to-date check
# Complete = marker + metadata.csv + manifest.jsonl present; metadata.csv newer than every input;
# metadata ids exactly the expected ids, in order; one wav per id and no others; every wav at the
# asked rate.
corpus_is_current() {
  local dir="$1" meta="$1/metadata.csv" f
  [[ -f "$dir/$MARKER" && -f "$meta" && -f "$dir/manifest.jsonl" && -d "$dir/wavs" ]] || return 1
  for f in "${files[@]}" "$SCRIPT"; do
    [[ "$meta" -nt "$f" ]] || return 1
  done
  [[ "$(cut -d'|' -f1 "$meta")" == "$(printf '%s\n' "${ids[@]}")" ]] || return 1
  [[ "$(wc -l <"$dir/manifest.jsonl")" -eq "$total" ]] || return 1
  local wavs=("$dir"/wavs/*.wav)
  [[ ${#wavs[@]} -eq "$total" ]] || return 1
  for f in "${ids[@]}"; do
    [[ -s "$dir/wavs/$f.wav" ]] || return 1
  done
  [[ "$(soxi -r "${wavs[@]}" 2>/dev/null | sort -u)" == "$sample_rate" ]] || return 1
}

if ((!force)) && corpus_is_current "$OUT_DIR"; then
  log "$OUT_DIR is up to date ($total clips at $sample_rate Hz); nothing to do (--force rebuilds)"
  exit 0
fi

if [[ -d "$OUT_DIR" && ! -f "$OUT_DIR/$MARKER" ]] && [[ -n "$(ls -A -- "$OUT_DIR")" ]]; then
  die "$OUT_DIR exists, is not empty and was not made by this script (no $MARKER); refusing to replace it"
fi

available_voices="$(espeak-ng --voices | awk 'NR > 1 { print $2 }')"
for v in $(printf '%s\n' "${voices[@]}" | sed 's/+.*//' | sort -u); do
  grep -qx -- "$v" <<<"$available_voices" || die "espeak-ng has no '$v' voice"
done

# ---------------------------------------------------------------------------- build
start_ns="$(date +%s%N)"
work="$(mktemp -d "$out_parent/.$out_name.tmp.XXXXXX")"
old="$out_parent/.$out_name.old.$$"
cleanup() {
  # If we were stopped between the two renames, put the previous corpus back.
  if [[ -d "$old" ]]; then
    if [[ -e "$OUT_DIR" ]]; then rm -rf -- "$old"; else mv -- "$old" "$OUT_DIR"; fi
  fi
  rm -rf -- "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$work/wavs" "$work/.text"
job_list="$work/.jobs"
: >"$job_list"
for i in "${!ids[@]}"; do
  printf '%s\n' "${texts[$i]}" >"$work/.text/${ids[$i]}.txt"
  printf '%s %s\n' "${ids[$i]}" "${voices[$i]}" >>"$job_list"
done

# One clip: synthesise with espeak-ng (22050 Hz mono 16-bit), resample with sox only if needed.
make_clip() {
  local id="$1" voice="$2" raw="$WORK/.text/$1.raw.wav" wav="$WORK/wavs/$1.wav" rate dur
  if ! espeak-ng -v "$voice" -s "$ESPEAK_WPM" -f "$WORK/.text/$id.txt" -w "$raw" 2>"$raw.err" ||
    [[ ! -s "$raw" ]]; then
    printf '%s: error: espeak-ng failed for %s (voice %s): %s\n' "$PROG" "$id" "$voice" "$(cat "$raw.err")" >&2
    return 1
  fi
  rate="$(soxi -r "$raw")"
  if [[ "$rate" == "$SAMPLE_RATE" ]]; then
    mv -- "$raw" "$wav"
  elif ! sox -D -R -V1 "$raw" -r "$SAMPLE_RATE" -c 1 -b 16 -e signed-integer "$wav"; then
    printf '%s: error: sox failed to resample %s to %s Hz\n' "$PROG" "$id" "$SAMPLE_RATE" >&2
    return 1
  fi
  dur="$(soxi -D "$wav")"
  printf '  %s  %-9s %5.2f s\n' "$id" "$voice" "$dur"
}
export -f make_clip
export PROG ESPEAK_WPM WORK="$work" SAMPLE_RATE="$sample_rate"

n_en=0 n_fa=0
for l in "${langs[@]}"; do
  if [[ "$l" == en ]]; then n_en=$((n_en + 1)); else n_fa=$((n_fa + 1)); fi
done
log "building $total clips ($n_en en, $n_fa fa) at $sample_rate Hz with $jobs parallel jobs -> $OUT_DIR"
if ! xargs -P "$jobs" -n 2 bash -c 'make_clip "$@"' _ <"$job_list"; then
  die "synthesis failed (see the clip errors above); $OUT_DIR left unchanged"
fi

# Every clip must be 2-10 s, mono, 16-bit, at the asked rate.
log "checking $total clips"
bad=0 min_d="" max_d=""
for id in "${ids[@]}"; do
  wav="$work/wavs/$id.wav"
  d="$(soxi -D "$wav")" c="$(soxi -c "$wav")" b="$(soxi -b "$wav")" r="$(soxi -r "$wav")"
  if ! awk -v d="$d" -v lo="$MIN_SECONDS" -v hi="$MAX_SECONDS" 'BEGIN { exit !(d >= lo && d <= hi) }'; then
    printf '%s: error: clip %s is %s s long, outside %s-%s s\n' "$PROG" "$id" "$d" "$MIN_SECONDS" "$MAX_SECONDS" >&2
    bad=$((bad + 1))
  fi
  if [[ "$c" != 1 || "$b" != 16 || "$r" != "$sample_rate" ]]; then
    printf '%s: error: clip %s is %s ch / %s bit / %s Hz, want 1 / 16 / %s\n' "$PROG" "$id" "$c" "$b" "$r" "$sample_rate" >&2
    bad=$((bad + 1))
  fi
  min_d="$(awk -v a="$d" -v m="$min_d" 'BEGIN { print (m == "" || a < m) ? a : m }')"
  max_d="$(awk -v a="$d" -v m="$max_d" 'BEGIN { print (m == "" || a > m) ? a : m }')"
done
((bad == 0)) || die "$bad clip check(s) failed; $OUT_DIR left unchanged"

json_string() {
  local s="$1"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  printf '"%s"' "$s"
}

# manifest.jsonl, then metadata.csv last (its presence and mtime mark the corpus complete).
{
  for i in "${!ids[@]}"; do
    printf '{"id":%s,"audio":%s,"text":%s,"speaker":%s,"language":%s}\n' \
      "$(json_string "${ids[$i]}")" "$(json_string "wavs/${ids[$i]}.wav")" \
      "$(json_string "${texts[$i]}")" "$(json_string "${speakers[$i]}")" "$(json_string "${langs[$i]}")"
  done
} >"$work/manifest.jsonl"
printf 'sluice sample corpus; made by scripts/make-sample-corpus.sh\nsample_rate=%s\nclips=%s\n%s\n' \
  "$sample_rate" "$total" "$(espeak-ng --version)" >"$work/$MARKER"
for i in "${!ids[@]}"; do
  printf '%s|%s|%s\n' "${ids[$i]}" "${texts[$i]}" "${texts[$i]}"
done >"$work/metadata.csv"
rm -rf -- "$work/.text" "$job_list"
chmod 755 "$work"   # mktemp -d makes it 0700

# Swap into place: move any previous corpus aside, rename the new one in, drop the old one.
if [[ -e "$OUT_DIR" ]]; then mv -- "$OUT_DIR" "$old"; fi
mv -- "$work" "$OUT_DIR"
rm -rf -- "$old"

end_ns="$(date +%s%N)"
secs="$(awk -v a="$start_ns" -v b="$end_ns" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')"
log "done: $total clips ($n_en en, $n_fa fa), durations $min_d-$max_d s, in $secs s -> $OUT_DIR"
