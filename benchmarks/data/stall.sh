#!/usr/bin/env bash
# The data-stall breakdown (Mohan et al., VLDB 2021) in one command: ResNet-18 trained by dtune-train
# on synthetic data, then on JPEG shards read from S3 over a genuinely slow link, without the node
# cache and with it, two epochs each. Prints each epoch's stall fraction (data-wait time over step
# time) and the breakdown: preparation stall = warm-cache epoch - synthetic, fetch stall = cold
# epoch - warm-cache epoch (per-step milliseconds).
#
# The S3 server (moto) runs in a network namespace behind a veth pair whose server-to-client side is
# shaped by tc's tbf qdisc (iproute2); the script sets it up and tears it down. Needs root.
#
#   bash benchmarks/data/stall.sh [--rate 8mbit] [--samples 256] [--batch 16] [--image-size 112]
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=8mbit samples=256 batch=16 image=112 workers=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --image-size) image=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "stall.sh: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "stall.sh: error: needs root (network namespace and tc)" >&2; exit 2; }
bin=${DTUNE_BIN_DIR:-build/bin}
py=.venv/bin/python
ns=dtune-stall-$$ host_if=dts$$h ns_if=dts$$n
net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250)).
host_ip=${net}1 ns_ip=${net}2 port=5000
work=$(mktemp -d /tmp/dtune-stall.XXXXXX)
server_pid=

cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_if" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$ns"
ip link add "$host_if" type veth peer name "$ns_if"
ip link set "$ns_if" netns "$ns"
ip addr add "${host_ip}/24" dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add "${ns_ip}/24" dev "$ns_if"
ip netns exec "$ns" ip link set "$ns_if" up
ip netns exec "$ns" ip link set lo up
# Server -> client: the direction the training data flows.
ip netns exec "$ns" tc qdisc add dev "$ns_if" root tbf rate "$rate" burst 32kbit latency 400ms

ip netns exec "$ns" "$py" -m moto.server -H "$ns_ip" -p "$port" >"$work/moto.log" 2>&1 &
server_pid=$!
export AWS_ENDPOINT_URL="http://${ns_ip}:${port}" AWS_ACCESS_KEY_ID=dtune AWS_SECRET_ACCESS_KEY=dtune-secret \
  AWS_REGION=us-east-1
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
for _ in $(seq 100); do
  "$py" - <<PY 2>/dev/null && break || sleep 0.2
import boto3; boto3.client("s3", endpoint_url="$AWS_ENDPOINT_URL").create_bucket(Bucket="dtune")
PY
done

echo "# link: tbf $rate from the S3 server (moto in netns $ns) to the trainer"
"$bin/dtune-data" make images --out s3://dtune/ds --samples "$samples" --classes 10 --width 500 --height 375 \
  --size-jitter 0.2 --shard-samples 64 | tail -1
steps=$((2 * samples / batch))
train=("$bin/dtune-train" --model resnet18 --image-size "$image" --num-classes 10 --batch "$batch"
       --steps "$steps" --warmup-steps 0 --workers "$workers")
"${train[@]}" --data synthetic --output "$work/synthetic.h5" >/dev/null
"${train[@]}" --data s3://dtune/ds --output "$work/nocache.h5" >/dev/null
"${train[@]}" --data s3://dtune/ds --cache-dir "$work/cache" --output "$work/cache.h5" >/dev/null

"$py" - "$work" "$((samples / batch))" <<'PY'
import sys
import h5py
import numpy as np
work, per_epoch = sys.argv[1], int(sys.argv[2])

def epochs(name):
    with h5py.File(f"{work}/{name}.h5") as f:
        (g,) = f["runs"].values()
        total, data = g["total_ms"][:, 0], g["data_ms"][:, 0]
    # epoch 1 leaves out its first step (start-up), epoch 2 is whole
    out = []
    for lo, hi in ((1, per_epoch), (per_epoch, 2 * per_epoch)):
        out.append((total[lo:hi].mean(), data[lo:hi].sum() / total[lo:hi].sum()))
    return out

rows = {n: epochs(n) for n in ("synthetic", "nocache", "cache")}
print(f"# {'run':<24} {'epoch':>5} {'step_ms':>9} {'stall':>7}")
labels = {"synthetic": "synthetic (in memory)", "nocache": "S3, no cache", "cache": "S3 + node cache"}
for n, eps in rows.items():
    for e, (ms, stall) in enumerate(eps, 1):
        print(f"  {labels[n]:<24} {e:>5} {ms:>9.1f} {100 * stall:>6.1f}%")
syn = np.mean([ms for ms, _ in rows["synthetic"]])
warm, cold = rows["cache"][1][0], rows["cache"][0][0]
print(f"# breakdown per step: compute {syn:.1f} ms; preparation stall (warm cache - synthetic) {warm - syn:+.1f} ms; "
      f"fetch stall (cold - warm) {cold - warm:+.1f} ms")
PY
