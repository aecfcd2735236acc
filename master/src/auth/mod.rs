//! Who may call what: bearer tokens, each with one [`Role`].
//!
//! `--token` is the cluster's admin token (the quick start's only token, and what masters
//! present to each other); `--tokens-file` adds named tokens with roles ([`tokens_file`]),
//! reloaded on SIGHUP. A token is looked up by its SHA-256, so the master never holds the
//! tokens of the file, only their hashes.
//!
//! Each gRPC service is wrapped in an [`Auth::interceptor`] that admits the roles the service
//! serves and records the [`Caller`] in the request's extensions; methods that need more (the
//! read methods of `Ingest`) check it again with [`require`]. A missing or unknown token is
//! UNAUTHENTICATED; a known token of the wrong role is PERMISSION_DENIED; a token over its
//! rate limit (per master) is RESOURCE_EXHAUSTED. Device tokens, public by nature, always have
//! budgets ([`budget`]).

pub mod budget;
pub mod tokens_file;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tonic::{Request, Status};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submit reports only (what an app with the SDK ships); reads nothing.
    Device,
    /// Submit, and read jobs, results and crash groups.
    Ingest,
    /// Register, lease, heartbeat, complete and fail — only as the worker it registered.
    Worker,
    /// Everything: all of the above, the cluster status, backups and membership changes; and
    /// the masters' Raft transport while no `--peer-token` separates it.
    Admin,
    /// The masters' Raft transport only (`Peer`): what masters present to each other with
    /// `--peer-token`, so that no admin token can step a master's Raft or replace its index.
    Peer,
    /// Upload debug files and source maps into its projects (the `Uploads` service), and
    /// nothing else: what a build machine holds instead of bucket credentials.
    Upload,
}

impl Role {
    /// The role's name as the tokens file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Device => "device",
            Role::Ingest => "ingest",
            Role::Worker => "worker",
            Role::Admin => "admin",
            Role::Peer => "peer",
            Role::Upload => "upload",
        }
    }
}

/// The authenticated caller of a request (in its extensions once an interceptor admitted it).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name (`admin` for `--token`): shown in logs, never the token.
    pub name: Arc<str>,
    /// What it may do.
    pub role: Role,
    /// The projects it serves; `None`: every project (`worker` and `admin` tokens).
    pub projects: Option<Projects>,
    /// Its rate limit, when the tokens file gives one or the token is a device's (shared by
    /// every call of the token on this master).
    pub limit: Option<RateLimit>,
    /// Its byte budget, when the tokens file gives one or the token is a device's.
    pub bytes: Option<budget::ByteBudget>,
    /// A device token's projects' rate limits: each shared by every device token of that
    /// project on this master (`--device-project-rate`); empty for other tokens.
    pub project_limits: Arc<[(Arc<str>, RateLimit)]>,
    /// Largest report or JS stack it may submit (decompressed, bytes), when smaller than the
    /// API's: a device token's.
    pub max_report_bytes: Option<usize>,
}

/// The projects a `device`, `ingest` or `upload` token serves (validated names, at least one).
pub type Projects = Arc<[String]>;

impl Caller {
    /// Whether the token serves `project`.
    pub fn serves(&self, project: &str) -> bool {
        self.projects
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| p == project))
    }

    /// The project a call names (`requested`, possibly empty), resolved for this token:
    /// - a name: checked (INVALID_ARGUMENT when malformed) and served (PERMISSION_DENIED when
    ///   not);
    /// - empty: the token's project when it serves exactly one; `default` for tokens of every
    ///   project; INVALID_ARGUMENT for a token of several, which must name one.
    pub fn project_for(&self, requested: &str) -> Result<String, Status> {
        if requested.is_empty() {
            return match self.projects.as_deref() {
                None => Ok(symcluster_proto::project::DEFAULT_PROJECT.to_owned()),
                Some([only]) => Ok(only.clone()),
                Some(list) => Err(Status::invalid_argument(format!(
                    "token {:?} serves the projects {}: name one (`project`)",
                    self.name,
                    list.join(", ")
                ))),
            };
        }
        symcluster_proto::project::validate(requested).map_err(Status::invalid_argument)?;
        if self.serves(requested) {
            Ok(requested.to_owned())
        } else {
            Err(Status::permission_denied(format!(
                "token {:?} does not serve project {requested:?}",
                self.name
            )))
        }
    }

    /// Which projects a listing shows (`requested` names one, or is empty for every project the
    /// token serves): the test a listing applies to each project, or [`Caller::project_for`]'s
    /// refusal of the named one.
    pub fn listing(&self, requested: &str) -> Result<impl Fn(&str) -> bool + '_, Status> {
        let only = if requested.is_empty() {
            None
        } else {
            Some(self.project_for(requested)?)
        };
        Ok(move |project: &str| match &only {
            Some(only) => project == only,
            None => self.serves(project),
        })
    }
    /// Takes one call (or streamed job) from the token's budget, then from each of its
    /// projects' device budgets: RESOURCE_EXHAUSTED naming the token (or the project) and its
    /// rate when one is spent.
    pub fn take(&self) -> Result<(), Status> {
        if let Some(limit) = &self.limit
            && limit.limiter.check().is_err()
        {
            crate::metrics::REFUSED
                .with_label_values(&["device_rate"])
                .inc();
            return Err(crate::service::exhausted(
                format!(
                    "token {:?} is over its rate limit of {} calls per second (burst {})",
                    self.name, limit.rate, limit.burst
                ),
                budget::DEVICE_RETRY_MS,
            ));
        }
        for (project, limit) in self.project_limits.iter() {
            if limit.limiter.check().is_err() {
                crate::metrics::REFUSED
                    .with_label_values(&["device_project_rate"])
                    .inc();
                return Err(crate::service::exhausted(
                    format!(
                        "the device tokens of project {project:?} are over their rate limit of {} \
                         calls per second (burst {})",
                        limit.rate, limit.burst
                    ),
                    budget::DEVICE_RETRY_MS,
                ));
            }
        }
        Ok(())
    }
}

/// A token's rate limit: a token bucket (GCRA, the `governor` crate) refilled at `rate` calls
/// per second, holding at most `burst`.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Calls per second.
    pub rate: f64,
    /// Calls allowed at once.
    pub burst: u32,
    limiter: Arc<governor::DefaultDirectRateLimiter>,
}

impl RateLimit {
    /// `None` unless `rate` is a positive finite number and `burst` (default: `rate` rounded
    /// up, at least 1) is at least 1.
    pub fn new(rate: f64, burst: Option<u32>) -> Option<Self> {
        if !(rate.is_finite() && rate > 0.0) {
            return None;
        }
        let burst = burst.unwrap_or(rate.ceil().clamp(1.0, u32::MAX as f64) as u32);
        let period = std::time::Duration::try_from_secs_f64(1.0 / rate).ok()?;
        let quota =
            governor::Quota::with_period(period)?.allow_burst(std::num::NonZeroU32::new(burst)?);
        Some(RateLimit {
            rate,
            burst,
            limiter: Arc::new(governor::RateLimiter::direct(quota)),
        })
    }
}

/// The roles a service admits, for [`Auth::interceptor`].
pub const INGEST_ROLES: &[Role] = &[Role::Device, Role::Ingest, Role::Admin];
/// Roles that may read jobs, results and groups.
pub const READ_ROLES: &[Role] = &[Role::Ingest, Role::Admin];
/// Roles of the worker-facing service.
pub const WORKER_ROLES: &[Role] = &[Role::Worker, Role::Admin];
/// Roles that see the cluster status, take backups and change the members.
pub const ADMIN_ROLES: &[Role] = &[Role::Admin];
/// Roles of the `Uploads` service (build machines; admin for the shared prefix).
pub const UPLOAD_ROLES: &[Role] = &[Role::Upload, Role::Admin];
/// Roles of the masters' Raft transport with `--peer-token`.
pub const PEER_ROLES: &[Role] = &[Role::Peer];
/// Roles of the masters' Raft transport without `--peer-token` (as in earlier versions).
pub const ADMIN_OR_PEER_ROLES: &[Role] = &[Role::Admin, Role::Peer];
/// Every role: the admin service answers anyone where the leader is (clients find it so).
pub const ALL_ROLES: &[Role] = &[
    Role::Device,
    Role::Ingest,
    Role::Worker,
    Role::Admin,
    Role::Peer,
    Role::Upload,
];

/// SHA-256 of `bytes` (FIPS 180-4).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// SHA-256 of a token → its caller.
type Table = HashMap<[u8; 32], Caller>;

/// The token table: the admin token and the tokens file's, swapped whole on reload.
#[derive(Clone)]
pub struct Auth {
    admin: [u8; 32],
    peer: Option<[u8; 32]>,
    file: Option<PathBuf>,
    devices: budget::DeviceBudgets,
    table: Arc<RwLock<Arc<Table>>>,
}

impl Auth {
    /// `admin_token` (role admin, named `admin`), `peer_token` when given (role peer, named
    /// `peer`) and, when given, the tokens of `tokens_file`, device tokens with `devices`'
    /// budgets where the file gives none. Errors: the file's ([`tokens_file::load`]).
    pub fn new(
        admin_token: &str,
        peer_token: Option<&str>,
        tokens_file: Option<PathBuf>,
        devices: budget::DeviceBudgets,
    ) -> Result<Self, String> {
        let auth = Auth {
            admin: sha256(admin_token.as_bytes()),
            peer: peer_token.map(|t| sha256(t.as_bytes())),
            file: tokens_file,
            devices,
            table: Arc::default(),
        };
        auth.reload()?;
        Ok(auth)
    }

    /// Reads the tokens file again and swaps the table in whole; on an error the previous table
    /// stays. Returns the number of tokens, the admin token included.
    pub fn reload(&self) -> Result<usize, String> {
        let mut table = match &self.file {
            Some(path) => tokens_file::load(path, &self.devices)?,
            None => HashMap::new(),
        };
        table.insert(
            self.admin,
            Caller {
                name: Arc::from("admin"),
                role: Role::Admin,
                projects: None,
                limit: None,
                bytes: None,
                project_limits: Arc::new([]),
                max_report_bytes: None,
            },
        );
        if let Some(peer) = self.peer {
            table.insert(
                peer,
                Caller {
                    name: Arc::from("peer"),
                    role: Role::Peer,
                    projects: None,
                    limit: None,
                    bytes: None,
                    project_limits: Arc::new([]),
                    max_report_bytes: None,
                },
            );
        }
        let n = table.len();
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
        Ok(n)
    }

    /// The caller presenting `authorization: Bearer <token>`, or UNAUTHENTICATED.
    pub fn authenticate<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let value = request
            .metadata()
            .get("authorization")
            .ok_or_else(|| {
                Status::unauthenticated("missing `authorization: Bearer <token>` metadata")
            })?
            .to_str()
            .map_err(|_| Status::unauthenticated("invalid bearer token"))?;
        let token = value
            .strip_prefix("Bearer ")
            .ok_or_else(|| Status::unauthenticated("invalid bearer token"))?;
        let table = self.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        table
            .get(&sha256(token.as_bytes()))
            .cloned()
            .ok_or_else(|| Status::unauthenticated("invalid bearer token"))
    }

    /// An interceptor admitting callers whose role is in `roles`, recording the [`Caller`].
    pub fn interceptor(&self, service: &'static str, roles: &'static [Role]) -> Interceptor {
        Interceptor {
            auth: self.clone(),
            service,
            roles,
            client_cert: false,
        }
    }
}

/// See [`Auth::interceptor`].
#[derive(Clone)]
pub struct Interceptor {
    auth: Auth,
    service: &'static str,
    roles: &'static [Role],
    client_cert: bool,
}

impl Interceptor {
    /// With `required`, a call must also come over TLS with a client certificate (which
    /// rustls has already verified against `--tls-client-ca`), else UNAUTHENTICATED.
    pub fn with_client_cert(mut self, required: bool) -> Self {
        self.client_cert = required;
        self
    }
}

impl tonic::service::Interceptor for Interceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if self.client_cert && request.peer_certs().is_none_or(|certs| certs.is_empty()) {
            return Err(Status::unauthenticated(format!(
                "{} needs a client certificate signed by the cluster's client CA",
                self.service
            )));
        }
        let caller = self.auth.authenticate(&request)?;
        check(&caller, self.roles, self.service)?;
        caller.take()?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

fn check(caller: &Caller, roles: &[Role], what: &str) -> Result<(), Status> {
    if roles.contains(&caller.role) {
        return Ok(());
    }
    let allowed: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    Err(Status::permission_denied(format!(
        "token {:?} has role {}; {what} needs {}",
        caller.name,
        caller.role.as_str(),
        allowed.join(" or ")
    )))
}

/// The request's caller when its role is in `roles` (for `what`, e.g. `reading jobs`), else
/// PERMISSION_DENIED. A request that no interceptor admitted (in-process tests) is refused too.
pub fn require<T>(request: &Request<T>, roles: &[Role], what: &str) -> Result<Caller, Status> {
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the call was not authenticated"))?;
    check(&caller, roles, what)?;
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(token: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    }

    #[test]
    fn roles_are_admitted_per_service_and_reload_swaps_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let entry = |name: &str, token: &str, role: &str| {
            format!(
                "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n\
                 projects = [\"demo\"]\n",
                hex::encode(sha256(token.as_bytes()))
            )
        };
        std::fs::write(&path, entry("app", "d", "device")).unwrap();
        let auth = Auth::new(
            "root",
            Some("between-masters"),
            Some(path.clone()),
            budget::DeviceBudgets::default(),
        )
        .unwrap();
        let mut ingest = auth.interceptor("Ingest", INGEST_ROLES);
        let mut admin = auth.interceptor("Admin", ADMIN_ROLES);
        use tonic::service::Interceptor as _;

        let admitted = ingest.call(request("d")).unwrap();
        let caller = require(&admitted, READ_ROLES, "reading jobs").unwrap_err();
        assert_eq!(caller.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            caller.message(),
            "token \"app\" has role device; reading jobs needs ingest or admin"
        );
        assert_eq!(
            admin.call(request("d")).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert!(admin.call(request("root")).is_ok());
        // The peer token reaches the Raft transport only; with it, the admin token does not.
        let mut peer = auth.interceptor("the masters' Raft transport", PEER_ROLES);
        assert!(peer.call(request("between-masters")).is_ok());
        assert_eq!(
            peer.call(request("root")).unwrap_err().message(),
            "token \"admin\" has role admin; the masters' Raft transport needs peer"
        );
        assert_eq!(
            admin.call(request("between-masters")).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            ingest.call(request("nope")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            ingest.call(Request::new(())).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );

        // Reload: the device token is gone, an ingest token appears; a broken file keeps the
        // table as it was.
        std::fs::write(&path, entry("svc", "i", "ingest")).unwrap();
        assert_eq!(
            auth.reload(),
            Ok(3),
            "the file's token, the admin and the peer token"
        );
        assert_eq!(
            ingest.call(request("d")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let admitted = ingest.call(request("i")).unwrap();
        assert_eq!(
            &*require(&admitted, READ_ROLES, "reading jobs").unwrap().name,
            "svc"
        );
        std::fs::write(&path, "[[tokens]]\nname = 1\n").unwrap();
        assert!(auth.reload().is_err());
        assert!(ingest.call(request("i")).is_ok());
    }

    #[test]
    fn a_call_resolves_to_a_project_the_token_serves() {
        let caller = |projects: Option<&[&str]>| Caller {
            name: Arc::from("t"),
            role: Role::Ingest,
            projects: projects.map(|p| p.iter().map(|s| s.to_string()).collect()),
            limit: None,
            bytes: None,
            project_limits: Arc::new([]),
            max_report_bytes: None,
        };
        let one = caller(Some(&["demo"]));
        assert_eq!(one.project_for("").unwrap(), "demo");
        assert_eq!(one.project_for("demo").unwrap(), "demo");
        let denied = one.project_for("other").unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            denied.message(),
            "token \"t\" does not serve project \"other\""
        );
        assert_eq!(
            one.project_for("Bad/Name").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let sees = one.listing("").unwrap();
        assert!(sees("demo") && !sees("other"));
        assert!(one.serves("demo") && !one.serves("other"));

        let two = caller(Some(&["a", "b"]));
        let unnamed = two.project_for("").unwrap_err();
        assert_eq!(unnamed.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            unnamed.message(),
            "token \"t\" serves the projects a, b: name one (`project`)"
        );
        let sees = two.listing("b").unwrap();
        assert!(sees("b") && !sees("a"));
        assert_eq!(
            two.listing("c").err().map(|e| e.code()),
            Some(tonic::Code::PermissionDenied)
        );

        let all = caller(None);
        assert_eq!(all.project_for("").unwrap(), "default");
        assert_eq!(all.project_for("any").unwrap(), "any");
    }
}
