# Shared by the benchmark scripts; sourced after they set:
#   hbm    the hbm binary
#   name   the testbed name (namespaces hbm-NAME-*, lock /run/hbm-testbed/NAME.lock)
#   group  the cgroup the benchmark creates, /TOP/LEAF
# It checks root and the binary, and installs the backstop cleanup.

me="$(basename "$0")"
if [ "$(id -u)" -ne 0 ]; then
	echo "$me: needs root (namespaces, cgroups, BPF)" >&2
	exit 1
fi
if [ ! -x "$hbm" ]; then
	echo "$me: $hbm not found: run make build (or set HBM_BIN)" >&2
	exit 1
fi

# The Go side removes everything itself, also on SIGINT/SIGTERM. This trap is
# the backstop for a harder death: only what this benchmark creates.
cleanup() {
	local rc=$?
	# Another live benchmark holds the testbed lock: its state is not ours.
	local lock=/run/hbm-testbed/$name.lock
	if [ -e "$lock" ] && command -v flock >/dev/null && ! flock -n "$lock" true; then
		exit "$rc"
	fi
	"$hbm" unset "$group" >/dev/null 2>&1 || true
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^hbm-$name-[^-]+$" || true); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
	local mnt top
	top="${group#/}"
	top="${top%%/*}"
	mnt="$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo | head -n1)"
	if [ -n "$mnt" ] && [ -d "$mnt/$top" ]; then
		rmdir "$mnt$group" "$mnt/$top" 2>/dev/null || true
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# secs turns a bare number into seconds ("10" -> "10s").
secs() { case "$1" in *[a-z]) echo "$1" ;; *) echo "${1}s" ;; esac; }
