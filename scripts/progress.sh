# Progress for long scripts (sourced by scripts/main.sh and scripts/setup.sh): no stretch of more
# than 10 seconds without a line. `step LABEL CMD...` runs CMD, copies its output, and after 10 s
# without a line prints one saying what runs, for how long, and about how long is left: the time the
# same step took last time on this machine (results/.progress-seconds, written after each step), or
# a first-run guess given by `expect LABEL SECONDS`.
#   progress_begin TOTAL_STEPS; expect NAME SECONDS; step NAME CMD...; progress_end
_progress_file=${DTUNE_PROGRESS_FILE:-results/.progress-seconds}
_progress_every=${DTUNE_PROGRESS_EVERY:-10}  # seconds of silence before a progress line
_progress_t0=$SECONDS
_progress_n=0
_progress_total=0
declare -A _progress_last=() _progress_guess=()

_fmt_s() {  # 75 -> 1m15s
  local s=$1
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}
progress_say() { printf '[%s +%s] %s\n' "${PROGRESS_NAME:-main}" "$(_fmt_s $((SECONDS - _progress_t0)))" "$*"; }

# The file is data: a line is kept only as `<label> <whole seconds>` (labels as step's: letters,
# digits, - _ .). Anything else (`sweep 1.5`, `x[$(cmd)]`, a torn line) is dropped, said once, and
# the file rewritten without it: a value reaches bash's arithmetic only as digits, so a corrupt file
# can neither stop the job nor run a command.
progress_begin() {
  _progress_total=$1
  local name secs rest dropped=0
  if [[ -f "$_progress_file" ]]; then
    while IFS=' ' read -r name secs rest || [[ -n "$name" ]]; do
      if [[ "$name" =~ ^[A-Za-z0-9_.-]+$ && "$secs" =~ ^[0-9]{1,9}$ && -z "$rest" ]]; then
        _progress_last[$name]=$((10#$secs))
      elif [[ -n "$name$secs$rest" ]]; then
        dropped=$((dropped + 1))
      fi
    done <"$_progress_file"
    if ((dropped)); then
      progress_say "ignored $dropped malformed line(s) of $_progress_file (want: <step> <whole seconds>); rewriting it"
      _progress_save
    fi
  fi
}
_progress_save() {  # the last times, one `<label> <seconds>` line each, replaced atomically
  local i
  mkdir -p "$(dirname "$_progress_file")"
  for i in "${!_progress_last[@]}"; do echo "$i ${_progress_last[$i]}"; done >"$_progress_file.tmp" &&
    mv "$_progress_file.tmp" "$_progress_file"
}
expect() { _progress_guess[$1]=$2; }
_estimate() { echo "${_progress_last[$1]:-${_progress_guess[$1]:-0}}"; }

# What is left after the current step: the estimates of the steps not yet started.
_after=()
progress_plan() { _after=("$@"); }

# Ctrl-C reaches the whole foreground group: the ticker ignores it and copies the step's output to
# its end, so what the step says as it stops ("interrupted ... rerun to resume") reaches the user.
_ticker() {  # copies stdin; after 10 s without a line, says what runs
  trap '' INT
  local name=$1 t0=$2 line rc est left rest=0 s pending=""
  for s in "${_after[@]}"; do rest=$((rest + $(_estimate "$s"))); done
  while true; do
    if IFS= read -r -t "$_progress_every" line; then
      printf '%s\n' "$pending$line"
      pending=""
    else
      rc=$?
      if ((rc > 128)); then
        # A partial line read before the timeout is held until its end, so that the progress
        # line is never glued into the middle of the step's own line.
        pending+=$line
        est=$(_estimate "$name")
        left=$((est - (SECONDS - t0)))
        if ((est == 0)); then
          progress_say "$name: $(_fmt_s $((SECONDS - t0))) so far (no estimate yet); then about $(_fmt_s "$rest") for the rest"
        else
          local basis="it took $(_fmt_s "$est") last time"
          [[ -n "${_progress_last[$name]:-}" ]] || basis="a first run's guess: $(_fmt_s "$est")"
          if ((left > 0)); then
            progress_say "$name: $(_fmt_s $((SECONDS - t0))) so far, about $(_fmt_s "$left") left ($basis); then about $(_fmt_s "$rest") for the rest"
          else
            progress_say "$name: $(_fmt_s $((SECONDS - t0))) so far, longer than expected ($basis); then about $(_fmt_s "$rest") for the rest"
          fi
        fi
      else
        [[ -n "$pending$line" ]] && printf '%s\n' "$pending$line"
        return 0
      fi
    fi
  done
}

step() {  # step NAME CMD...: runs CMD with a progress line after every 10 s of silence
  local name=$1
  shift
  _progress_n=$((_progress_n + 1))
  local i
  for i in "${!_after[@]}"; do [[ "${_after[$i]}" == "$name" ]] && unset '_after[i]'; done
  _after=("${_after[@]}")
  progress_say "step $_progress_n of $_progress_total: $name"
  local t0=$SECONDS rc=0
  "$@" 2>&1 | _ticker "$name" "$t0" || rc=$?
  ((rc == 0)) || return "$rc"
  _progress_last[$name]=$((SECONDS - t0))
  _progress_save
  progress_say "$name: done in $(_fmt_s $((SECONDS - t0)))"
}

progress_end() { progress_say "all done in $(_fmt_s $((SECONDS - _progress_t0)))"; }
