//! Real network partitions for test clusters: each master in a network namespace of its own,
//! joined to the root namespace (where the test, the clients, the workers and Garage run) by a
//! veth pair on a bridge. Links between masters are cut with blackhole routes inside a
//! master's namespace, so a partition separates masters from each other while every client
//! still reaches every master: the case where a leader cut off from its followers goes on
//! answering its clients. Needs root and `ip` (iproute2).
//!
//! A blackhole route discards what the master sends to that address (the other side hears
//! nothing of it): a cut in both directions is a route on each side, a one-way cut a route on
//! one side only.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Networks made by this process so far: the next one gets other names and another subnet.
static MADE: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; an error names the command and what `ip` said.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Hosts `10.S.T.1..` in namespaces of their own, the bridge at `10.S.T.254` in the root
/// namespace; everything deleted on drop, even when a test fails.
pub struct Network {
    tag: u32,
    subnet: String,
    hosts: Vec<u32>,
    /// The blackhole routes in place: (host whose sends are dropped, host they are for).
    cut: BTreeSet<(u32, u32)>,
}

impl Network {
    /// A bridge and `count` hosts (1..=count). Panics when the namespaces cannot be made (not
    /// root, no iproute2), naming the command that failed.
    pub fn new(count: u32) -> Self {
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let mut net = Network {
            tag: (pid % 10_000) * 10 + made % 10,
            subnet: format!("10.{}.{}", 200 + made % 50, pid % 250),
            hosts: Vec::new(),
            cut: BTreeSet::new(),
        };
        let bridge = net.bridge();
        // A leftover of a killed run of the same pid and count: gone first.
        let _ = ip(&["link", "del", &bridge]);
        let setup = || -> Result<(), String> {
            ip(&["link", "add", &bridge, "type", "bridge"])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/24", net.bridge_address()),
                "dev",
                &bridge,
            ])?;
            ip(&["link", "set", &bridge, "up"])
        };
        setup().unwrap_or_else(|e| panic!("a bridge for the test network: {e}"));
        for host in 1..=count {
            net.add_host(host);
        }
        net
    }

    /// Makes host `host`'s namespace, veth pair and address, unless it exists. Panics as
    /// [`Network::new`].
    pub fn add_host(&mut self, host: u32) {
        if self.hosts.contains(&host) {
            return;
        }
        let ns = self.namespace(host);
        let (outside, inside) = (self.veth(host), format!("svi{}_{host}", self.tag));
        let _ = ip(&["netns", "del", &ns]);
        let setup = || -> Result<(), String> {
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &outside, "master", &self.bridge()])?;
            ip(&["link", "set", &outside, "up"])?;
            let address = format!("{}/24", self.address(host));
            ip(&["-n", &ns, "addr", "add", &address, "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])
        };
        setup().unwrap_or_else(|e| panic!("host {host} of the test network: {e}"));
        self.hosts.push(host);
    }

    fn bridge(&self) -> String {
        format!("sbr{}", self.tag)
    }

    fn veth(&self, host: u32) -> String {
        format!("svo{}_{host}", self.tag)
    }

    /// Host `host`'s namespace (`ip netns exec NAME ...` runs a process there).
    pub fn namespace(&self, host: u32) -> String {
        format!("symcluster-{}-{host}", self.tag)
    }

    /// Host `host`'s address.
    pub fn address(&self, host: u32) -> String {
        format!("{}.{host}", self.subnet)
    }

    /// The root namespace's address on the bridge: what the hosts reach it by.
    pub fn bridge_address(&self) -> String {
        format!("{}.254", self.subnet)
    }

    /// Cuts (or restores) host `host`'s only link: it reaches nothing and nothing reaches it,
    /// clients included.
    pub fn set_link(&self, host: u32, up: bool) {
        ip(&[
            "link",
            "set",
            &self.veth(host),
            if up { "up" } else { "down" },
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Drops whatever host `from` sends to host `to` (a blackhole route in `from`'s
    /// namespace); other traffic, `to`'s sends to `from` included, still flows. Idempotent.
    pub fn cut_one_way(&mut self, from: u32, to: u32) {
        if from != to && self.cut.insert((from, to)) {
            self.blackhole("add", from, to);
        }
    }

    /// Cuts hosts `a` and `b` from each other, both ways.
    pub fn cut(&mut self, a: u32, b: u32) {
        self.cut_one_way(a, b);
        self.cut_one_way(b, a);
    }

    /// Removes every cut: every host reaches every other again.
    pub fn heal(&mut self) {
        for (from, to) in std::mem::take(&mut self.cut) {
            self.blackhole("del", from, to);
        }
    }

    /// `ip route VERB blackhole` for `to`'s address in `from`'s namespace.
    fn blackhole(&self, verb: &str, from: u32, to: u32) {
        let route = format!("{}/32", self.address(to));
        ip(&[
            "-n",
            &self.namespace(from),
            "route",
            verb,
            "blackhole",
            &route,
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for &host in &self.hosts {
            let _ = ip(&["link", "del", &self.veth(host)]);
            let _ = ip(&["netns", "del", &self.namespace(host)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// A TCP forwarder in the root namespace: accepts on the bridge's address and relays each
/// connection to a loopback port, so that processes in the hosts' namespaces reach a server
/// that listens on `127.0.0.1` there (Garage). Stops accepting when dropped; relays end with
/// their connections.
pub struct Forwarder {
    /// Where the hosts connect: `bridge address:port`.
    pub address: SocketAddr,
    stop: Arc<AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on `listen` (an address of the root namespace, port 0 for any) and relays to
    /// `127.0.0.1:to_port`. Errors: the address cannot be listened on.
    pub fn start(listen: &str, to_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind((listen, 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let accepting = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        let _ = inbound.set_nonblocking(false);
                        if let Ok(outbound) = TcpStream::connect((Ipv4Addr::LOCALHOST, to_port)) {
                            relay(inbound, outbound);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Forwarder {
            address,
            stop,
            accepting: Some(accepting),
        })
    }
}

/// Copies each way on a thread of its own until either side closes.
fn relay(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one_way = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    one_way(a, b2);
    one_way(b, a2);
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}
