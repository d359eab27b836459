# nspair.sh: the benchmark scripts' two-host lab, sourced (not run) by
# scripts/bench-*.sh. Two network namespaces joined by a veth pair; every
# function returns non-zero on failure and leaves cleanup to nspair_down.

# nspair_require NAME TOOL...: fails, saying why as NAME, unless run as root
# with every TOOL (a command name or path) found.
nspair_require() {
	local name=$1 t
	shift
	[ "$(id -u)" = 0 ] || { echo "$name: needs root" >&2; return 1; }
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "$name: $t not found" >&2; return 1; }
	done
}

# nspair_cgroot prints where cgroup2 is mounted (from mountinfo).
nspair_cgroot() { awk '$9 == "cgroup2" {print $5; exit}' /proc/self/mountinfo; }

# nspair_up C S DEV NET: namespaces C and S, the veth DEV in both, C at
# NET.1/24 and S at NET.2/24 (NET: three octets, e.g. 198.18.8), lo up.
nspair_up() {
	ip netns add "$1" && ip netns add "$2" &&
		ip link add "$3" netns "$1" type veth peer name "$3" netns "$2" &&
		ip -n "$1" addr add "$4.1/24" dev "$3" && ip -n "$2" addr add "$4.2/24" dev "$3" &&
		ip -n "$1" link set "$3" up && ip -n "$2" link set "$3" up &&
		ip -n "$1" link set lo up && ip -n "$2" link set lo up
}

# nspair_down C S: kills every process in the namespaces and deletes them;
# quiet where they do not exist (a crashed run's leftovers, or none).
nspair_down() {
	local ns
	for ns in "$1" "$2"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
	sleep 0.2
	ip netns del "$1" 2>/dev/null
	ip netns del "$2" 2>/dev/null
	return 0
}

# nspair_medians reads one run per line of whitespace-separated numbers
# (a column's "never", a wake that never came, counts as 1e9) and prints
# each column's "MEDIAN (MIN-MAX)", tab-separated, on one line.
nspair_medians() {
	awk '{ for (i = 1; i <= NF; i++) v[i, NR] = ($i == "never" ? 1e9 : $i); if (NF > n) n = NF }
		function med(i,   a, k, j, t) { for (k = 1; k <= NR; k++) a[k] = v[i, k]
			for (k = 1; k <= NR; k++) for (j = k + 1; j <= NR; j++) if (a[j] < a[k]) { t = a[k]; a[k] = a[j]; a[j] = t }
			return sprintf("%s (%s-%s)", a[int((NR + 1) / 2)], a[1], a[NR]) }
		END { for (i = 1; i <= n; i++) printf "%s%s", med(i), (i < n ? "\t" : "\n") }'
}

# nspair_bps RATE prints RATE (NNmbit or NNgbit) in bits per second.
nspair_bps() {
	case $1 in
	*mbit) echo $((${1%mbit} * 1000000)) ;;
	*gbit) echo $((${1%gbit} * 1000000000)) ;;
	*) echo "rate $1: use NNmbit or NNgbit" >&2; return 1 ;;
	esac
}

# nspair_cleanup HBM CGROOT C S GROUP...: unsets each group (deepest first,
# as given), kills and deletes the namespaces, removes the groups'
# directories under CGROOT; quiet where something does not exist.
nspair_cleanup() {
	local hbm=$1 cg=$2 c=$3 s=$4 g
	shift 4
	for g in "$@"; do "$hbm" unset "$g" >/dev/null 2>&1; done
	nspair_down "$c" "$s"
	for g in "$@"; do rmdir "$cg$g" 2>/dev/null; done
	return 0
}
