# herd doctor's trial in a container (`LaunchPlan::container_trial`): that the job can start
# there, as far as it can be told without starting it. POSIX sh, run in the container after
# the job's `setup` as `sh -c SCRIPT herd-check LAUNCHER [PYTHON]`.
#
# argv:   $1 the launcher (torchrun, deepspeed, or a command job's program)
#         $2 a torch launcher's Python (what herd's output multiplexer runs); none for a
#            command job. With it, the Python the launcher starts must import torch.
# stderr: one line `herd: ...` saying what is wrong, last.
# exit:   127 a program is not on PATH; 126 the launcher's `#!` interpreter is not in the
#         container (a venv's python3 is often a link into a pyenv or conda outside it);
#         3 the launcher's Python cannot import torch; 0 all is well.
launcher=$1
python=${2-}
for p in "$launcher" ${python:+"$python"}; do
  command -v "$p" >/dev/null 2>&1 || { echo "herd: $p is not in the container" >&2; exit 127; }
done
path=$(command -v "$launcher")
# The Python the launcher runs: its #! interpreter (or what `#!/usr/bin/env NAME` finds).
runs=
case $path in
/*)
  first=
  IFS= read -r first <"$path" 2>/dev/null || true
  case $first in
  '#!'*)
    set -f
    # shellcheck disable=SC2086 # the #! line's words, split as the kernel splits them
    set -- ${first#??}
    interp=${1-}
    if [ ! -x "$interp" ]; then
      what="not in the container"
      [ -L "$interp" ] && what="a link to a file that is not in the container"
      echo "herd: $launcher's interpreter $interp (its #! line, in $path) is $what: mount it, or install it in the image" >&2
      exit 126
    fi
    runs=$interp
    case $interp in
    */env)
      name=${2-}
      if [ -n "$name" ] && ! command -v "$name" >/dev/null 2>&1; then
        echo "herd: $launcher's interpreter $name (its #! line, by $interp, in $path) is not on PATH in the container: mount it, or install it in the image" >&2
        exit 126
      fi
      runs=$(command -v "$name")
      ;;
    esac
    ;;
  esac
  ;;
esac
[ -n "$python" ] || exit 0
# A launcher with no #! line (a binary), or a shell wrapper, runs no Python that can be
# named here: the job's Python on PATH is tried instead.
case $runs in
*python*) ;;
*) runs=$(command -v "$python") ;;
esac
if ! err=$("$runs" -c 'import torch' 2>&1); then
  last=
  while IFS= read -r line; do
    [ -n "$line" ] && last=$line
  done <<EOF
$err
EOF
  echo "herd: $runs (the Python $launcher runs) cannot import torch in the container: $last" >&2
  exit 3
fi
