# Sourced by the setup scripts: installs Debian packages without ever
# removing or downgrading one the machine already has. Every install is
# simulated first; one that would take something away is retried from
# bookworm-backports (where a newer package the host has came from) or
# refused with the packages named.

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

say() { echo "setup: $*"; }

apt_log=/tmp/shardrec-setup-apt.log
apt_install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    --no-remove -o Dpkg::Use-Pty=0 "$@" >"$apt_log" 2>&1 ||
    { cat "$apt_log" >&2; exit 1; }
}

# What `apt-get install "$@"` would remove, one package a line (a downgrade
# apt refuses by itself under -y); "(unresolvable)" where it has no plan.
would_take_away() {
  local plan
  plan=$(apt-get install -s --no-install-recommends "$@" 2>/dev/null) || {
    echo "(unresolvable)"
    return
  }
  awk '/^Remv /{print $2}' <<<"$plan"
}

# How many packages `apt-get install "$@"` would install, dependencies
# included.
would_install() {
  apt-get install -s --no-install-recommends "$@" 2>/dev/null | grep -c '^Inst ' || true
}

backports=/etc/apt/sources.list.d/shardrec-bookworm-backports.sources
add_backports() {
  grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
  printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
    'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
    $sudo tee "$backports" >/dev/null
  say "added bookworm-backports to apt's sources ($backports); updating the package lists"
  $sudo apt-get update -qq
}

install_one() {
  local p=$1 away
  away=$(would_take_away "$p")
  if [ -z "$away" ]; then
    apt_install "$p"
    return
  fi
  add_backports
  if [ -z "$(would_take_away -t bookworm-backports "$p")" ]; then
    say "$p from bookworm-backports (bookworm's would remove or downgrade: $(echo $away))"
    apt_install -t bookworm-backports "$p"
    return
  fi
  echo "setup: not installing $p: it would remove or downgrade $(echo $away) on this machine" >&2
  exit 1
}

# Installs the packages named that are not installed yet, saying what and
# how many.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  say "updating apt's package lists"
  $sudo apt-get update -qq
  if [ -z "$(would_take_away "${missing[@]}")" ]; then
    say "installing ${missing[*]} ($(would_install "${missing[@]}") packages with what they need)"
    apt_install "${missing[@]}"
  else
    for p in "${missing[@]}"; do
      say "installing $p ($(would_install "$p") packages with what it needs)"
      install_one "$p"
    done
  fi
}
