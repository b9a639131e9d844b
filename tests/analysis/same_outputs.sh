#!/usr/bin/env bash
# The analysis's outputs on the committed runs, from this checkout and from git revision REV,
# compared file by file: `netsense report` (page, figures, tables), `compare`, `ab
# --from-runs` (two comparisons per folder), `sensing`, `export --tensorboard` (its scalars),
# `pack` and the simulation's calibration facts (`calibrate.load_runs`). For a refactoring
# of the analysis that must change no number (issue 51: one run reader).
#
#   tests/analysis/same_outputs.sh REV [OUT_DIR]
#
# Both read copies of REV's results/runs (and the analysis tests' fixture tree); nothing is
# written under results/. Masked before comparing: the output folder's name, the report's
# "generated" minute and commit, PDFs' creation date. Exit 0 when every file is the same,
# 1 otherwise (the files that differ are named). About a minute per side.
set -euo pipefail
if [ "${1:-}" = "" ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then  # the comment is the help
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
HERE=$(pwd)
REV=$1
OUT=${2:-$(mktemp -d /tmp/netsense-same.XXXXXX)}
PYBIN=${PY:-$HERE/.venv/bin/python}
BASE=$OUT/base-checkout
rm -rf "$BASE" && mkdir -p "$OUT"
git archive --format=tar "$REV" | (mkdir -p "$BASE" && tar -x -C "$BASE")

# outputs CODE DEST: every command of the code at CODE, on copies of REV's runs
outputs() {
  local code=$1 dest=$2 data=$OUT/data
  local py="env PYTHONPATH=$code $PYBIN"
  rm -rf "$dest" && mkdir -p "$dest"
  run() { local name=$1; shift; (cd "$OUT" && nice -n 19 "$@") >"$dest/$name.out" 2>"$dest/$name.err" \
    && echo "rc=0" >>"$dest/$name.out" || echo "rc=$?" >>"$dest/$name.out"; }
  fresh() { rm -rf "$data" && mkdir -p "$data" && for d in "$@"; do cp -a "$BASE/$d" "$data/"; done; }
  for ev in $(ls "$BASE/results/runs"); do
    fresh "results/runs/$ev"
    run "report-$ev" $py -m testbed.cli report -r "$data/$ev" --html "$dest/report-$ev/report.html" \
      -f "$dest/report-$ev/figures"
    run "compare-$ev" $py -m testbed.cli compare "$data/$ev" -o "$dest/compare-$ev"
    run "pack-$ev" $py -m testbed.cli pack "$data/$ev" -o "$dest/pack-$ev"
    run "export-$ev" $py -m testbed.cli export "$data/$ev" --tensorboard "$dest/tb-$ev"
    mkdir -p "$dest/dump-$ev"
    run "dump-$ev" $py "$HERE/tests/analysis/same_outputs_dump.py" "$data/$ev" "$dest/tb-$ev" "$dest/dump-$ev"
    rm -rf "$dest/tb-$ev"
    for ab in $(cd "$data" && find . -name ab.json -printf '%h\n' | sort); do
      n=$(echo "$ab" | tr '/=.' '___')
      run "ab-$n" $py -m testbed.cli ab --from-runs "$data/$ab"
      run "ab-tta-$n" $py -m testbed.cli ab --from-runs "$data/$ab" --metric tta
      mkdir -p "$dest/ab-$n" && cp "$data/$ab"/ab*.json "$data/$ab"/ab*.csv "$dest/ab-$n/"
    done
    for r in $(cd "$data" && find . -name bottleneck.csv -printf '%h\n' | sort | head -4); do
      run "sensing-$(echo "$r" | tr '/=.' '___')" $py -m testbed.cli sensing "$data/$r" \
        -o "$dest/sensing-$(echo "$r" | tr '/=.' '___')"
    done
  done
  fresh tests/analysis/data/results
  run report-fixture $py -m testbed.cli report -r "$data/results" --html "$dest/report-fixture/report.html" \
    -f "$dest/report-fixture/figures"
  run pack-fixture $py -m testbed.cli pack "$data/results" -o "$dest/pack-fixture"
  rm -rf "$data"
}
outputs "$BASE" "$OUT/a"
outputs "$HERE" "$OUT/b"

norm() {
  sed -E -e "s#$1#OUT#g" -e 's/generated [0-9-]+ [0-9:]+ UTC/generated T/' \
    -e 's/Made by the code at [^;]*;/Made by the code at C;/' -e 's#/CreationDate \([^)]*\)##' "$2"
}
bad=0
for f in $(cd "$OUT/a" && find . -type f | sort); do
  if [ ! -f "$OUT/b/$f" ]; then echo "only from $REV: $f"; bad=1
  elif ! cmp -s <(norm "$OUT/a" "$OUT/a/$f") <(norm "$OUT/b" "$OUT/b/$f"); then echo "differs: $f"; bad=1; fi
done
for f in $(cd "$OUT/b" && find . -type f | sort); do
  [ -f "$OUT/a/$f" ] || { echo "only from this checkout: $f"; bad=1; }
done
n=$(cd "$OUT/a" && find . -type f | wc -l)
[ $bad = 0 ] && echo "the same: all $n files ($OUT)" || echo "($OUT/a: $REV, $OUT/b: this checkout)"
exit $bad
