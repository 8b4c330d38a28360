# Sourced by the namespace benchmarks: "machines" as network namespaces, each joined by a veth
# pair to a bridge in a switch namespace of its own, every link shaped with tc to a rate in both
# directions (tbf; this kernel has no netem, so no added delay). Needs root and iproute2.
#   netns_star SWITCH NODE_PREFIX VETH_PREFIX SUBNET COUNT RATE
# makes namespaces NODE_PREFIX0.. at SUBNET.1.., their interfaces VETH_PREFIX<i>; the caller
# removes them (ip netns del) in its cleanup.
netns_star() {
  local sw=$1 node=$2 veth=$3 subnet=$4 count=$5 rate=$6 i ns
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  for i in $(seq 0 $((count - 1))); do
    ns=$node$i
    ip netns add "$ns"
    ip link add "$veth$i" type veth peer name "${veth}s$i"
    ip link set "$veth$i" netns "$ns"
    ip link set "${veth}s$i" netns "$sw"
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev "$veth$i"
    ip -n "$ns" link set "$veth$i" up
    ip -n "$ns" link set lo up
    ip -n "$sw" link set "${veth}s$i" master br0
    ip -n "$sw" link set "${veth}s$i" up
    ip netns exec "$ns" tc qdisc add dev "$veth$i" root tbf rate "$rate" burst 64kb latency 100ms
    ip netns exec "$sw" tc qdisc add dev "${veth}s$i" root tbf rate "$rate" burst 64kb latency 100ms
  done
}
