# Sourced by Scripts/test and Scripts/bench: the one way they start a throwaway gnome-keyring on
# the private session bus they run in (dbus-run-session), never the user's own.
#
#   start_throwaway_keyring SCRATCH WHO PASSWORD
#
# starts gnome-keyring-daemon with its keyrings under the caller's XDG_DATA_HOME, unlocked with
# PASSWORD, its log in SCRATCH/keyring.log, and sets KEYRING_PID (the caller stops it by that
# PID). It returns once the daemon owns org.freedesktop.secrets, or fails after 10 s with the log,
# naming WHO (the script) in the message.
start_throwaway_keyring() {
  local scratch="$1" who="$2" password="$3" owned=""
  # --unlock reads the password of the login keyring from stdin, creating that keyring (and making
  # it the default collection) when it does not exist yet.
  printf '%s' "$password" |
    gnome-keyring-daemon --foreground --unlock --components=secrets >"$scratch/keyring.log" 2>&1 &
  KEYRING_PID=$!
  for _ in $(seq 1 100); do
    if dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q "boolean true"; then
      owned=yes
      break
    fi
    sleep 0.1
  done
  if [ -z "$owned" ]; then
    echo "$who: gnome-keyring-daemon did not take org.freedesktop.secrets within 10 s" >&2
    cat "$scratch/keyring.log" >&2 || true
    return 1
  fi
}
