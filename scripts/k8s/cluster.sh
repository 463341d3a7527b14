#!/usr/bin/env bash
# runbox's test cluster: a real single-node Kubernetes (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet -> CRI -> containerd ->
# runc), built from the Go module proxy (build.sh) and Debian's containerd
# and runc, everything on 127.0.0.1. The provider/kubernetes tests and CI run
# against it. See docs/kubernetes.md.
#
#   cluster.sh build              build the binaries (build.sh)
#   cluster.sh start              certs, configs, start everything, wait for node Ready
#   cluster.sh import TAR...      import docker-archive/OCI tarballs into the node's runtime
#   cluster.sh import-docker IMG...  the same for images of the local Docker engine (docker save)
#   cluster.sh env                print `export KUBECONFIG=...`
#   cluster.sh status | stop | clean (stop, then wipe data and logs)
#
# RUNBOX_K8S_DIR (default /var/tmp/runbox-k8s) holds everything; stop kills
# only the PIDs start recorded there. Ports: env.sh.
#
# What this machine needs, each learned the hard way:
#   - no CAP_SYS_RESOURCE: containerd's restrict_oom_score_adj = true;
#   - the kubelet refuses a loopback --node-ip: --hostname-override=127.0.0.1;
#   - hybrid cgroups (v1 controllers): failCgroupV1 false, cgroupfs driver, and
#     a cgroup root of our own (/runbox-k8s) so another cluster can coexist;
#   - the kubelet rewrites host sysctls: containerd and the kubelet run in a
#     private mount namespace where those files are bind-mounted from files
#     holding the values it wants (and every container mount stays there);
#   - a node without a CNI network stays NotReady: cni/runbox-lo gives pods
#     their loopback and nothing else (no interface, bridge or route);
#   - no kube-proxy, no DNS: pods get `nameserver 127.0.0.1`;
#   - images are offline: `import` them, and pods use imagePullPolicy Never
#     or IfNotPresent;
#   - `nsenter -m` changes directory to /: absolute paths only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
D=$RUNBOX_K8S_DIR
mkdir -p "$D"
D=$(cd "$D" && pwd)
export PATH=/usr/local/go/bin:$D/bin:$PATH
export KUBECONFIG=$D/config/admin.kubeconfig
# Sockets and the kubelet's state live where a local sandbox's view hides
# them (provider/local: /run is a fresh tmpfs there, /var/lib/kubelet is
# masked, and a running containerd's --root and --state are): no socket of
# the cluster is in reach of a local sandbox's commands.
NAME=$(basename "$D")
RUNDIR=/run/$NAME
KUBELET_ROOT=/var/lib/kubelet/$NAME
SOCK=$RUNDIR/containerd.sock
PIDS=$D/pids
CGROOT=runbox-k8s

log() { echo "[$(date +%T)] k8s harness: $*" >&2; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
wait_for() { # seconds description cmd...
	local t=$1 d=$2
	shift 2
	local end=$(($(date +%s) + t))
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge $end ]; then
			log "timed out after ${t}s waiting for $d"
			return 1
		fi
		sleep 0.5
	done
}
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -f "$PIDS" ] && awk -v n="$1" '$1==n{print $2}' "$PIDS" | tail -1; }
record() { echo "$1 $2" >>"$PIDS"; }
in_ns() { nsenter -t "$(pid_of mntns)" -m -- "$@"; } # inside the private mount namespace
ctr_() { ctr -a "$SOCK" -n k8s.io "$@"; }

do_build() { "$here/build.sh" "$D/bin"; }

do_certs() {
	local P=$D/pki
	mkdir -p "$P"
	[ -f "$P/ca.crt" ] && [ -f "$P/sa.key" ] && return 0
	(
		cd "$P"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=runbox-k8s-ca" 2>/dev/null
		mk() { # name subject [subjectAltName]
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			if [ -n "${3:-}" ]; then
				printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
			else
				printf 'extendedKeyUsage=clientAuth\n' >"$1.ext"
			fi
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 30 -extfile "$1.ext" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		mk apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
		mk admin "/O=system:masters/CN=runbox-k8s-admin"
		mk kubelet "/O=system:nodes/CN=system:node:127.0.0.1"
		mk apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
		mk kcm "/CN=system:kube-controller-manager"
		mk scheduler "/CN=system:kube-scheduler"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		chmod 600 ./*.key
	)
}

kubeconfig() { # file user cert
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: runbox-k8s
  cluster:
    server: https://127.0.0.1:$RBK_APISERVER_PORT
    certificate-authority: $D/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $D/pki/$3.crt
    client-key: $D/pki/$3.key
contexts:
- name: runbox-k8s
  context: {cluster: runbox-k8s, user: $2, namespace: default}
current-context: runbox-k8s
EOF
}

do_configs() {
	local C=$D/config
	mkdir -p "$C" "$D/cni/bin" "$D/cni/net.d"
	kubeconfig "$C/admin.kubeconfig" admin admin
	kubeconfig "$C/kubelet.kubeconfig" kubelet kubelet
	kubeconfig "$C/kcm.kubeconfig" kcm kcm
	kubeconfig "$C/scheduler.kubeconfig" scheduler scheduler
	echo "nameserver 127.0.0.1" >"$C/resolv.conf"
	cp "$here/cni/runbox-lo" "$here/cni/loopback" "$D/cni/bin/"
	# Written before containerd starts (1.6 does not reload a renamed file).
	echo '{"cniVersion":"0.4.0","name":"runbox-lo","plugins":[{"type":"runbox-lo"}]}' >"$D/cni/net.d/10-runbox-lo.conflist"
	cat >"$C/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $RBK_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $RBK_KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$CGROOT
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $D/pki/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: []
resolvConf: $C/resolv.conf
podLogsDir: $D/data/kubelet-podlogs
staticPodPath: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%", imagefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 10s
serializeImagePulls: false
maxPods: 60
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
runtimeRequestTimeout: 2m
shutdownGracePeriod: 0s
podPidsLimit: 4096
EOF
	cat >"$C/containerd.toml" <<EOF
version = 2
root = "$D/data/containerd/root"
state = "$D/data/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$RUNDIR/containerd-debug.sock"
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  netns_mounts_under_state_dir = true
  sandbox_image = "runbox-k8s.local/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$D/data/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$D/cni/bin"
    conf_dir = "$D/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/data/containerd/opt"
EOF
}

# pause_image builds the pod sandbox ("pause") image from the static pause binary.
pause_image() {
	local out=$D/images/pause.tar
	[ -f "$out" ] && return 0
	local r
	r=$(mktemp -d)
	chmod 0755 "$r"
	mkdir -p "$r"/{dev,proc,sys,etc} "$D/images"
	cp "$D/bin/pause" "$r/pause"
	"$here/mkimage.sh" runbox-k8s.local/pause:1 "$r" '["/pause"]' 'null' "$out" >/dev/null
	rm -rf "$r"
}

start_mntns() {
	alive "$(pid_of mntns)" && return 0
	mkdir -p "$D/run/sysctl"
	setsid unshare -m --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
	record mntns $!
	wait_for 10 "private mount namespace" sh -c "[ \"\$(readlink /proc/$!/ns/mnt)\" != \"\$(readlink /proc/self/ns/mnt)\" ]"
	# The kubelet (protectKernelDefaults false) writes these three; it sees
	# the values it wants in files of its own, the host keeps its own.
	echo 1 >"$D/run/sysctl/overcommit_memory"
	echo 10 >"$D/run/sysctl/panic"
	echo 1 >"$D/run/sysctl/panic_on_oops"
	in_ns mount --bind "$D/run/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
	in_ns mount --bind "$D/run/sysctl/panic" /proc/sys/kernel/panic
	in_ns mount --bind "$D/run/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
	# shim sockets and /var/log/containers links stay off the host (the
	# mount point may not exist where no containerd ran from its package)
	mkdir -p /run/containerd
	in_ns mount -t tmpfs tmpfs /run/containerd
	in_ns mount -t tmpfs tmpfs /var/log
}

start_etcd() {
	alive "$(pid_of etcd)" && return 0
	mkdir -p "$D/data/etcd"
	setsid "$D/bin/etcd" --name runbox-k8s --data-dir "$D/data/etcd" \
		--listen-client-urls "http://127.0.0.1:$RBK_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$RBK_ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$RBK_ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$RBK_ETCD_PEER_PORT" \
		--initial-cluster "runbox-k8s=http://127.0.0.1:$RBK_ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes 2147483648 \
		</dev/null >"$D/logs/etcd.log" 2>&1 &
	record etcd $!
	wait_for 60 etcd curl -sf "http://127.0.0.1:$RBK_ETCD_PORT/health"
}

start_apiserver() {
	alive "$(pid_of kube-apiserver)" && return 0
	local P=$D/pki
	setsid "$D/bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$RBK_ETCD_PORT" \
		--bind-address=127.0.0.1 --secure-port="$RBK_APISERVER_PORT" --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
		--kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
		--kubelet-port="$RBK_KUBELET_PORT" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction --allow-privileged=true \
		--cert-dir="$D/data/apiserver-certs" --profiling=false \
		</dev/null >"$D/logs/kube-apiserver.log" 2>&1 &
	record kube-apiserver $!
	wait_for 120 kube-apiserver kubectl get --raw /readyz
}

start_containerd() {
	alive "$(pid_of containerd)" && return 0
	mkdir -p "$D/data/containerd" "$RUNDIR"
	setsid nsenter -t "$(pid_of mntns)" -m -- "$(command -v containerd)" --config "$D/config/containerd.toml" \
		--root "$D/data/containerd/root" --state "$D/data/containerd/state" --address "$SOCK" \
		</dev/null >"$D/logs/containerd.log" 2>&1 &
	record containerd $!
	wait_for 60 containerd ctr -a "$SOCK" version
	import_tars "$D/images/pause.tar"
}

start_control() {
	local P=$D/pki C=$D/config
	if ! alive "$(pid_of kube-controller-manager)"; then
		setsid "$D/bin/kube-controller-manager" --kubeconfig="$C/kcm.kubeconfig" --authentication-kubeconfig="$C/kcm.kubeconfig" \
			--authorization-kubeconfig="$C/kcm.kubeconfig" --bind-address=127.0.0.1 --secure-port="$RBK_KCM_PORT" --leader-elect=false \
			--use-service-account-credentials=true --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
			--cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" --cluster-name=runbox-k8s \
			--service-cluster-ip-range=10.96.0.0/16 --profiling=false \
			</dev/null >"$D/logs/kube-controller-manager.log" 2>&1 &
		record kube-controller-manager $!
	fi
	if ! alive "$(pid_of kube-scheduler)"; then
		setsid "$D/bin/kube-scheduler" --kubeconfig="$C/scheduler.kubeconfig" --authentication-kubeconfig="$C/scheduler.kubeconfig" \
			--authorization-kubeconfig="$C/scheduler.kubeconfig" --bind-address=127.0.0.1 --secure-port="$RBK_SCHED_PORT" --leader-elect=false \
			--profiling=false </dev/null >"$D/logs/kube-scheduler.log" 2>&1 &
		record kube-scheduler $!
	fi
}

start_kubelet() {
	alive "$(pid_of kubelet)" && return 0
	mkdir -p "$KUBELET_ROOT" "$D/data/kubelet-podlogs"
	# The kubelet wants its cgroup root to exist in every hierarchy it uses.
	local h
	for h in /sys/fs/cgroup/*/; do
		case $h in */unified/) continue ;; esac
		mkdir -p "$h$CGROOT" 2>/dev/null || true
	done
	# a new v1 cpuset group starts empty: give it its parent's cpus and mems
	local cs=/sys/fs/cgroup/cpuset
	if [ -d "$cs/$CGROOT" ]; then
		[ -n "$(cat "$cs/$CGROOT/cpuset.cpus")" ] || cat "$cs/cpuset.cpus" >"$cs/$CGROOT/cpuset.cpus"
		[ -n "$(cat "$cs/$CGROOT/cpuset.mems")" ] || cat "$cs/cpuset.mems" >"$cs/$CGROOT/cpuset.mems"
	fi
	setsid nsenter -t "$(pid_of mntns)" -m -- "$D/bin/kubelet" --config="$D/config/kubelet-config.yaml" \
		--kubeconfig="$D/config/kubelet.kubeconfig" --root-dir="$KUBELET_ROOT" --hostname-override=127.0.0.1 --v=1 \
		</dev/null >"$D/logs/kubelet.log" 2>&1 &
	record kubelet $!
	wait_for 120 "node registration" kubectl get node 127.0.0.1
}

do_start() {
	[ -x "$D/bin/kubelet" ] || { log "no binaries in $D/bin: run '$0 build' first"; return 1; }
	mkdir -p "$D/logs" "$D/run" "$D/data"
	local t0
	t0=$(now)
	do_certs
	do_configs
	pause_image
	start_mntns
	start_etcd
	log "etcd up (+$(since "$t0")s)"
	start_apiserver
	log "apiserver ready (+$(since "$t0")s)"
	start_containerd
	log "containerd up (+$(since "$t0")s)"
	start_control
	start_kubelet
	log "node registered (+$(since "$t0")s)"
	kubectl wait --for=condition=Ready node/127.0.0.1 --timeout=180s >/dev/null
	log "node Ready (+$(since "$t0")s)"
	# Pods need the default ServiceAccount, which the controller-manager makes.
	wait_for 120 "the default ServiceAccount" kubectl -n default get serviceaccount default
	log "cluster ready (+$(since "$t0")s): export KUBECONFIG=$KUBECONFIG"
}

import_tars() {
	local f
	for f in "$@"; do
		in_ns ctr -a "$SOCK" -n k8s.io images import --all-platforms "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" >/dev/null
	done
}

do_import() {
	[ $# -gt 0 ] || { log "import: name docker-archive or OCI tarballs"; return 2; }
	import_tars "$@"
	ctr_ images ls -q | grep -v '^sha256:' >&2
}

do_import_docker() {
	[ $# -gt 0 ] || { log "import-docker: name images of the local Docker engine"; return 2; }
	local img tmp
	tmp=$(mktemp "$D/images/docker.XXXXXX.tar")
	for img in "$@"; do
		docker save -o "$tmp" "$img"
		import_tars "$tmp"
	done
	rm -f "$tmp"
	ctr_ images ls -q | grep -v '^sha256:' >&2
}

do_status() {
	[ -f "$PIDS" ] || { echo "not started"; return 0; }
	local n p tot=0 r
	while read -r n p; do
		if alive "$p"; then
			r=$(awk '/VmRSS/{print $2}' "/proc/$p/status")
			tot=$((tot + r))
			printf '%-24s pid %-7s rss %6d MiB\n' "$n" "$p" $((r / 1024))
		else
			printf '%-24s pid %-7s DEAD\n' "$n" "$p"
		fi
	done <"$PIDS"
	echo "total RSS of the cluster's daemons: $((tot / 1024)) MiB"
}

do_stop() {
	[ -f "$PIDS" ] || return 0
	if alive "$(pid_of kube-apiserver)" && alive "$(pid_of kubelet)"; then
		kubectl delete pods --all -A --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 || true
	fi
	if alive "$(pid_of containerd)"; then
		local c
		for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$c" >/dev/null 2>&1 || true; done
		for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true; done
	fi
	local n p i
	for n in kube-scheduler kube-controller-manager kubelet containerd kube-apiserver etcd mntns; do
		for p in $(awk -v n=$n '$1==n{print $2}' "$PIDS"); do
			alive "$p" || continue
			kill "$p"
			for i in $(seq 40); do
				alive "$p" || break
				sleep 0.25
			done
			alive "$p" && kill -9 "$p"
		done
	done
	# shims our containerd started (matched by our socket path), by PID
	for p in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io -id .* -address $SOCK" || true); do kill "$p" 2>/dev/null || true; done
	# our cgroup root, deepest first
	for h in /sys/fs/cgroup/*/$CGROOT; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	rm -f "$PIDS"
	log "stopped"
}

do_clean() {
	do_stop
	# data/ may hold mounts only the (gone) private namespace saw; nothing on the host
	rm -rf "$D/data" "$D/run" "$D/logs" "$RUNDIR" "$KUBELET_ROOT"
	rmdir /var/lib/kubelet 2>/dev/null || true
	log "data wiped"
}

case "${1:-}" in
build) do_build ;;
start) do_start ;;
import) shift; do_import "$@" ;;
import-docker) shift; do_import_docker "$@" ;;
env) echo "export KUBECONFIG=$KUBECONFIG" ;;
status) do_status ;;
stop) do_stop ;;
clean) do_clean ;;
*)
	echo "usage: $0 build|start|import TAR...|import-docker IMAGE...|env|status|stop|clean" >&2
	exit 2
	;;
esac
