#!/usr/bin/env bash
# Docs that cannot go stale. Over README.md and docs/*.md:
#  (a) a fenced block right after `<!-- docs-check: same-as PATH -->` must be
#      PATH's text, and one after `<!-- docs-check: output -->` must be a
#      `$ build/bin/PROGRAM ARGS` line followed by exactly what it prints (the
#      README's tour and its output); every command of a block after
#      `<!-- docs-check: runs -->` (cheap ones only) must exit 0, run in a
#      scratch directory that sees the repo's data/; a heading "... in N lines"
#      must match; a `cpp` block after `<!-- docs-check: compiles -->` must
#      compile against the build tree (BUILD_DIR/include and its libraries):
#      a whole program (it has `int main(`) is built, run and must exit 0; a
#      fragment is compiled after the fragments above it on the same page
#      (a page's fragments are one translation unit, in order), with
#      <attograd/attograd.h>, <fmt/core.h> and `using namespace attograd;`
#      before it: its struct/class/template/using lines stay at namespace
#      scope, its other lines become the body of a function, whose parameters
#      the marker may give: `<!-- docs-check: compiles (Tensor x, Tensor g) -->`;
#  (b) every relative link and image points to an existing file, and every
#      #anchor to a heading of that file (GitHub's heading slugs);
#  (c) every `build/bin/PROGRAM ...` command in a fenced block names a program
#      of the tree, and its --flags appear in `PROGRAM [MODE] --help`; every
#      scripts/ or tools/ command names an existing file, and a scripts/
#      command's flags appear in its --help.
# Then it checks itself: a small tree with one fault of each kind must give
# exactly those faults.
# Usage: scripts/test.d/60-docs.sh BUILD_DIR   (the Release build; runs in seconds)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../.."
export LC_ALL=C.UTF-8
work=$(mktemp -d /tmp/attograd_docs.XXXXXX)
trap 'rm -rf "$work"' EXIT

problems=0 blocks=0 links=0 commands=0
problem() { echo "docs: $*"; problems=$((problems + 1)); }

# Lines of FILE outside fenced code blocks, with inline code spans removed.
prose() { awk '/^ *```/ { fence = !fence; next } !fence { gsub(/`[^`]*`/, ""); print }' "$1"; }

# GitHub's anchor for each heading of FILE, one per line (duplicates get -1, -2, ...).
anchors() {
  prose "$1" | sed -n 's/^#\{1,6\} \{1,\}//p' | sed -E 's/\[([^]]*)\]\([^)]*\)/\1/g' |
    sed 's/.*/\L&/; s/[^[:alnum:] _-]//g; s/ /-/g' |
    awk '{ n = seen[$0]++; print (n ? $0 "-" n : $0) }'
}

# C++ blocks against the build tree: its include/ (attograd/<part> links to
# the sources), the source root (attograd/attograd.h, and the root-relative
# includes between headers) and its static libraries.
cxx=${CXX:-c++}
cxx_flags=(-std=c++20 -I"$build/include" -I"$PWD")
libs() {  # the link line of the build tree's static libraries
  local part lib
  for part in data optim nn autograd tensor; do
    lib=$(find "$build" -maxdepth 2 -name "libattograd_$part.a" -print -quit)
    [[ -n $lib ]] || { echo "docs: no libattograd_$part.a in $build" >&2; return 1; }
    echo "$lib"
  done
  pkg-config --libs openblas
  echo -lfmt -pthread
}
compile_program() {  # BLOCK_FILE MD LINE: a whole program: build, run, exit 0
  local file=$1 md=$2 line=$3 exe=$1.exe
  { printf '#line %d "%s"\n' "$((line + 2))" "$md"; cat "$file"; } > "$file.cpp"
  if ! "$cxx" "${cxx_flags[@]}" -O1 "$file.cpp" $(libs) -o "$exe" > "$work/out" 2>&1; then
    problem "$md:$line: the C++ program does not compile:"; grep -E 'error|note: ' "$work/out" | head -n 10 | sed 's/^/  /'
  elif ! (cd "$work" && timeout 20 "$exe") > "$work/out" 2>&1; then
    problem "$md:$line: the C++ program failed:"; tail -n 5 "$work/out" | sed 's/^/  /'
  fi
}
# A fragment joins its page's translation unit: declarations (a struct, class
# or template up to its `};` at column 0, a using or #include line) at
# namespace scope, the rest in a function of the marker's parameters.
add_fragment() {  # BLOCK_FILE MD LINE
  local file=$1 md=$2 line=$3 tu=$work/tu/${2//\//_}.cpp
  mkdir -p "$work/tu"
  if [[ ! -f $tu ]]; then
    printf '#include <attograd/attograd.h>\n#include <fmt/core.h>\nusing namespace attograd;\n' > "$tu"
    echo "$md" > "$tu.md"
  fi
  awk -v md="$md" -v first=$((line + 2)) -v params="$(cat "$file.params")" -v n="$line" '
    function at(i) { return sprintf("#line %d \"%s\"\n", first + i - 1, md) }
    /^(struct|class|template|union|enum) / { decl = 1 }
    /^(using|#include) / { printf "%s%s\n", at(NR), $0; next }
    decl { printf "%s%s\n", at(NR), $0; if (/^};/) decl = 0; next }
    { body = body at(NR) $0 "\n" }
    END { printf "[[maybe_unused]] static void docs_fragment_%d%s {\n%s}\n", n, (params == "" ? "()" : params), body }
  ' "$file" >> "$tu"
}
compile_fragments() {  # each page's translation unit: syntax, types and templates
  local tu md
  for tu in "$work"/tu/*.cpp; do
    [[ -f $tu ]] || continue
    md=$(cat "$tu.md")
    if ! "$cxx" "${cxx_flags[@]}" -fsyntax-only "$tu" > "$work/out" 2>&1; then
      problem "$md: a C++ fragment does not compile:"; grep -E 'error|note: ' "$work/out" | head -n 10 | sed 's/^/  /'
    fi
  done
  rm -rf "$work/tu"
}

# (a) Each marked block goes to $work/blocks/N with "N kind arg md line" in $work/blocks/index.
check_marked_blocks() {  # ROOT MD...
  local root=$1 md n kind arg file line cmd
  shift
  mkdir -p "$work/blocks"
  : > "$work/blocks/index"
  for md in "$@"; do
    awk -v md="$md" -v prefix="$work/blocks/${md//\//_}" -v index_file="$work/blocks/index" '
      match($0, /^<!-- docs-check: (same-as [^ ]+|output|runs|compiles( \([^)]*\))?) -->$/) {
        text = substr($0, 18, length($0) - 21); split(text, w, " "); kind = w[1]; arg = w[2]; at = NR; want = 1
        if (kind == "compiles") { params = substr(text, 10); arg = "" }
        next }
      want == 1 && /^```/ { file = prefix "." ++count; printf "" > file
        if (kind == "compiles") { print params > (file ".params"); close(file ".params") }
        print file, kind, (arg == "" ? "-" : arg), md, at >> index_file; want = 2; next }
      want == 1 { print md ":" at ": docs-check marker not followed by a fenced block" > "/dev/stderr"; want = 0 }
      want == 2 && /^```/ { close(file); want = 0; next }
      want == 2 { print >> file }' "$root/$md"
  done
  while read -r file kind arg md line; do
    blocks=$((blocks + 1))
    case $kind in
      same-as)
        if [[ ! -f $root/$arg ]]; then problem "$md:$line: same-as names a missing file $arg"
        elif ! diff -u "$root/$arg" "$file" > "$work/diff"; then
          problem "$md:$line: the block differs from $arg:"; sed 's/^/  /' "$work/diff"
        fi ;;
      output)
        cmd=$(head -n 1 "$file")
        if [[ ! $cmd =~ ^\$\ build/bin/([A-Za-z0-9_]+)(\ .*)?$ ]]; then
          problem "$md:$line: an output block must start with '\$ build/bin/PROGRAM ...', got '$cmd'"; continue
        fi
        read -r -a args <<< "${BASH_REMATCH[2]}"
        if ! (cd "$root" && timeout 20 "$build/bin/${BASH_REMATCH[1]}" "${args[@]}") > "$work/out" 2> "$work/err"; then
          problem "$md:$line: '${cmd#\$ }' failed:"; sed 's/^/  /' "$work/err"
        elif ! tail -n +2 "$file" | diff -u - "$work/out" > "$work/diff"; then
          problem "$md:$line: the output of '${cmd#\$ }' is no longer the block (- block, + real output):"
          sed 's/^/  /' "$work/diff"
        fi ;;
      runs)
        mkdir -p "$work/run" && ln -sfn "$root/data" "$work/run/data"
        while IFS= read -r cmd; do
          [[ -z $cmd || $cmd == \#* ]] && continue
          if ! (cd "$work/run" && timeout 30 bash -c "${cmd//build\/bin\//$build/bin/}") > "$work/out" 2>&1; then
            problem "$md:$line: '$cmd' failed:"; tail -n 5 "$work/out" | sed 's/^/  /'
          fi
        done < "$file" ;;
      compiles)
        if grep -q 'int main(' "$file"; then compile_program "$file" "$md" "$line"
        else add_fragment "$file" "$md" "$line"; fi ;;
    esac
  done < "$work/blocks/index"
  compile_fragments
  # "in N lines" next to a same-as block: N is the file's line count.
  for md in "$@"; do
    while IFS=: read -r line n; do
      file=$(awk -v from="$line" 'NR > from && match($0, /docs-check: same-as [^ ]+/) { print substr($0, RSTART + 20, RLENGTH - 20); exit }' "$root/$md")
      [[ -n $file && -f $root/$file ]] || continue
      (( $(wc -l < "$root/$file") == n )) || problem "$md:$line: the heading says $n lines, $file has $(wc -l < "$root/$file")"
    done < <(grep -n '^#.* in [0-9]* lines' "$root/$md" | sed -E 's/^([0-9]+):.* in ([0-9]+) lines.*/\1:\2/')
  done
}

# (b) Relative links and anchors.
check_links() {  # ROOT MD...
  local root=$1 md target path anchor dir resolved
  shift
  for md in "$@"; do
    dir=$(dirname "$md")
    while read -r target; do
      [[ $target =~ ^(https?|mailto): ]] && continue
      links=$((links + 1))
      path=${target%%#*} anchor=
      [[ $target == *"#"* ]] && anchor=${target#*#}
      if [[ -z $path ]]; then resolved=$md; else resolved=$(realpath -m --relative-to="$root" "$root/$dir/$path"); fi
      if [[ ! -e $root/$resolved ]]; then problem "$md: link to a missing file: $target"; continue; fi
      if [[ -n $anchor && $resolved == *.md ]] && ! grep -qxF -- "$anchor" <<<"$(anchors "$root/$resolved")"; then
        problem "$md: link to a missing heading: $target (headings of $resolved: $(anchors "$root/$resolved" | paste -sd' '))"
      fi
    done < <(prose "$root/$md" | grep -o '\]([^) ]*)' | sed 's/^](//; s/)$//')
  done
}

# (c) Commands in fenced blocks.
help_of() {  # PROGRAM FIRST_ARG: the --help text of the program, in that mode if FIRST_ARG is one
  local bin=$build/bin/$1
  if [[ -n $2 && $2 != -* ]] && "$bin" "$2" --help 2>/dev/null; then return; fi
  "$bin" --help 2>/dev/null
}
check_commands() {  # ROOT MD...
  local root=$1 md cmd program flag words
  shift
  for md in "$@"; do
    # One command per line: a fenced line's build/bin/..., scripts/... or [python3] tools/... up to a comment, pipe or ';'.
    while IFS= read -r cmd; do
      read -r -a words <<< "$cmd"
      commands=$((commands + 1))
      program=${words[0]}
      case $program in
        build/bin/*)
          program=${program#build/bin/}
          if [[ -f $root/examples/$program/main.cpp ]]; then
            if [[ ! -x $build/bin/$program ]]; then problem "$md: '$cmd': $program is not built in $build"; continue; fi
            help_of "$program" "${words[1]:-}" > "$work/help" || true
          elif [[ -f $root/tests/$program.cpp || -f $root/bench/$program.cpp ]]; then
            continue  # a test or benchmark binary: it exists; its flags are Google Test's or Benchmark's
          else
            problem "$md: '$cmd': no program $program (no examples/$program/main.cpp)"; continue
          fi ;;
        scripts/* | tools/*)
          if [[ ! -f $root/$program ]]; then problem "$md: '$cmd': no file $program"; continue; fi
          [[ $program == scripts/* ]] || continue
          [[ $program == scripts/demo ]] && continue  # its flags go to copy_task train, and it builds: not run here
          "$root/$program" --help > "$work/help" 2>&1 || true ;;
      esac
      for flag in "${words[@]:1}"; do
        [[ $flag =~ ^(--[A-Za-z0-9][A-Za-z0-9-]*) ]] || continue
        flag=${BASH_REMATCH[1]}
        grep -qE -- "(^|[][ ,|])$flag([][ ,=]|$)" "$work/help" || problem "$md: '$cmd': $flag is not in $program's --help"
      done
    done < <(awk '/^ *```/ { fence = !fence; next } fence' "$root/$md" |
             grep -oE '(^|[|;&] *|^\$ )((/usr/bin/)?python3 )?(build/bin/|scripts/|tools/)[^|#;&]*' |
             sed -E 's/^([|;&] *|\$ )//; s/^(\/usr\/bin\/)?python3 //; s/ +$//')
  done
}

check_tree() {  # ROOT: every check over ROOT's README.md and docs/*.md
  local root=$1 mds=()
  mds=(README.md $(cd "$root" && ls docs/*.md 2>/dev/null))
  check_marked_blocks "$root" "${mds[@]}"
  check_links "$root" "${mds[@]}"
  check_commands "$root" "${mds[@]}"
}

start=$SECONDS
check_tree "$PWD"
found=$problems
echo "docs: README.md and $(ls docs/*.md | wc -l) pages: $blocks checked blocks, $links relative links, $commands commands;" \
  "$found problem(s) ($((SECONDS - start)) s)"

# The check checks itself: one fault of each kind, each must be reported.
t=$work/tree
mkdir -p "$t/docs" "$t/examples/tour" "$t/examples/copy_task"
printf 'int main() {}\n' > "$t/examples/tour/main.cpp"
: > "$t/examples/copy_task/main.cpp"
cat > "$t/README.md" <<'EOF'
# Broken on purpose
## The tour in 5 lines
<!-- docs-check: same-as examples/tour/main.cpp -->
```cpp
int main() { return 1; }
```
<!-- docs-check: output -->
```text
$ build/bin/tour
y = 41
```
See [a page](docs/missing.md), [a heading](docs/page.md#no-such-heading) and [a good one](docs/page.md#a-good-heading).
```sh
build/bin/no_such_program --x
build/bin/copy_task train --no-such-flag 3 --steps 5   # only --no-such-flag is wrong
scripts/no_such_script
```
<!-- docs-check: runs -->
```sh
build/bin/copy_task train --steps 0
```
<!-- docs-check: compiles (Tensor x) -->
```cpp
struct Twice { Tensor operator()(const Tensor& t) const { return t * 2.0; } };
Tensor y = Twice{}(x);
```
The next fragment sees the one above (a page is one translation unit):
<!-- docs-check: compiles -->
```cpp
Tensor z = Twice{}(undeclared_tensor);
```
<!-- docs-check: compiles -->
```cpp
#include <attograd/autograd/tensor.h>
int main() { return attograd::Tensor::ones({2}).numel() == 3 ? 0 : 1; }
```
EOF
printf '# Page\n## A good heading\n' > "$t/docs/page.md"
problems=0
check_tree "$t" > "$work/selftest"
expected=("differs from examples/tour/main.cpp" "the heading says 5 lines" "is no longer the block"
          "missing file: docs/missing.md" "missing heading: docs/page.md#no-such-heading"
          "no program no_such_program" "--no-such-flag is not in copy_task's --help" "no file scripts/no_such_script"
          "'build/bin/copy_task train --steps 0' failed" "README.md: a C++ fragment does not compile"
          "the C++ program failed")
selftest_ok=1
for e in "${expected[@]}"; do
  grep -qF -- "$e" "$work/selftest" || { echo "docs: self-test: the fault '$e' was not reported"; selftest_ok=0; }
done
grep -qE 'README\.md:[0-9]+:[0-9]+: error: .*undeclared_tensor' "$work/selftest" ||
  { echo "docs: self-test: the compiler's error does not point at the fragment's line in README.md"; selftest_ok=0; }
if (( problems != ${#expected[@]} )); then
  echo "docs: self-test: expected ${#expected[@]} problems in the broken tree, got $problems:"; sed 's/^/  /' "$work/selftest"
  selftest_ok=0
fi
(( selftest_ok )) && echo "docs: self-test: all ${#expected[@]} planted faults reported"
(( found == 0 && selftest_ok ))
