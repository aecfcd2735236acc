//! The masters' failpoints seen from a test (`master/src/failpoints.rs` names them and
//! says what each action does): armed for one start through `FAILPOINTS`, or while a master
//! runs through `PUT /fail/NAME` on its metrics port. The masters must be a build with the
//! `failpoints` feature (`scripts/test.sh` builds them so); another build answers 404, which
//! the calls here report as such.

use crate::cluster::Cluster;

/// What a master answered to a failpoint request: its HTTP status and body.
async fn send(address: &str, method: &str, path: &str, body: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok::<String, std::io::Error>(out)
    };
    let response = tokio::time::timeout(std::time::Duration::from_secs(5), talk)
        .await
        .map_err(|_| format!("{method} {path} on {address}: no answer within 5 s"))?
        .map_err(|e| format!("{method} {path} on {address}: {e}"))?;
    let status = response.split_whitespace().nth(1).unwrap_or("?");
    let text = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .trim();
    match status {
        "200" => Ok(text.to_owned()),
        "404" => Err(format!(
            "{method} {path} on {address}: 404, a master built without its failpoints \
             (cargo build --features symcluster-master/failpoints; scripts/test.sh does)"
        )),
        other => Err(format!("{method} {path} on {address}: {other} {text}")),
    }
}

impl Cluster {
    /// Starts master `id` (again) with the failpoints `spec` armed from its first instruction
    /// (`FAILPOINTS`, `name=actions;...`), for this start only.
    pub fn start_master_armed(&mut self, id: u64, spec: &str) {
        self.start_master_with_env(id, &[], &[("FAILPOINTS", spec)]);
    }

    /// Arms failpoint `name` of running master `id` with `actions` (`return` crashes it there,
    /// `sleep(ms)` stalls it). Errors: the master does not answer within 5 s, or refuses (an
    /// unknown point or action; 404 from a build without failpoints).
    pub async fn arm_failpoint(&self, id: u64, name: &str, actions: &str) -> Result<(), String> {
        let address = self.masters[id as usize - 1].metrics_address();
        send(&address, "PUT", &format!("/fail/{name}"), actions)
            .await
            .map(drop)
    }

    /// Disarms failpoint `name` of running master `id` (a thread paused there goes on).
    /// Errors: as [`Self::arm_failpoint`].
    pub async fn disarm_failpoint(&self, id: u64, name: &str) -> Result<(), String> {
        let address = self.masters[id as usize - 1].metrics_address();
        send(&address, "DELETE", &format!("/fail/{name}"), "")
            .await
            .map(drop)
    }

    /// The failpoints armed in running master `id`, as `name=actions` lines. Errors: as
    /// [`Self::arm_failpoint`].
    pub async fn armed_failpoints(&self, id: u64) -> Result<String, String> {
        let address = self.masters[id as usize - 1].metrics_address();
        send(&address, "GET", "/fail", "").await
    }
}
