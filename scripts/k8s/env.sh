# Shared settings of runbox's test cluster scripts (sourced, not run).
# RUNBOX_K8S_DIR holds binaries, PKI, configs, data and logs; its ports are
# chosen away from the usual Kubernetes ones so the cluster can live next to
# another single-node cluster on the same machine. Everything binds 127.0.0.1.
RUNBOX_K8S_DIR=${RUNBOX_K8S_DIR:-/var/tmp/runbox-k8s}
RBK_APISERVER_PORT=${RBK_APISERVER_PORT:-26443}
RBK_ETCD_PORT=${RBK_ETCD_PORT:-23890}
RBK_ETCD_PEER_PORT=${RBK_ETCD_PEER_PORT:-23891}
RBK_KUBELET_PORT=${RBK_KUBELET_PORT:-20250}
RBK_KUBELET_HEALTHZ_PORT=${RBK_KUBELET_HEALTHZ_PORT:-20248}
RBK_KCM_PORT=${RBK_KCM_PORT:-20257}
RBK_SCHED_PORT=${RBK_SCHED_PORT:-20259}
