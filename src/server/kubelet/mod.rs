//! What the kube-apiserver calls on a kubelet: the streaming server (exec, attach, port-forward).

pub mod spdy;
