//! A real container registry for the image-pull tests: Debian's `docker-registry` (the
//! reference registry server, which `tests/registry/install.sh` installs without starting its
//! system service), started by the test as its child on 127.0.0.1 with TLS (a CA of its own)
//! and htpasswd basic auth, and filled offline with `tests/cri/mkimage.py`'s tarballs.
//! `tests/registry/README.md` says how to do the same by hand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The one user of every test registry.
pub const USER: &str = "ferrolet-test";
/// Its password.
pub const PASSWORD: &str = "pull-secret-1";

/// How long a registry is given to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// `tests/registry/`.
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/registry")
}

/// Whether `cmd` is a file in a `$PATH` directory.
fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// A running `docker-registry serve`, its files in a directory of the test's: killed (and
/// waited for) when dropped, and the `hosts.toml` files `trust` wrote are removed.
pub struct Registry {
    /// The user pulls and pushes authenticate as (`USER`).
    pub user: String,
    /// Its password (`PASSWORD`).
    pub password: String,
    dir: PathBuf,
    port: u16,
    child: Child,
    trusted: Mutex<Vec<PathBuf>>,
}

impl Registry {
    /// A registry with its certificates, htpasswd file, config and storage in `dir` (made if
    /// missing), answering on `https://127.0.0.1:<free port>/v2/`; `None`, after saying why the
    /// test skips, when docker-registry, htpasswd or openssl is not installed. Panics when
    /// the registry is there but does not come up.
    pub fn start(dir: &Path) -> Option<Registry> {
        let missing: Vec<&str> =
            ["docker-registry", "htpasswd", "openssl"].into_iter().filter(|c| !on_path(c)).collect();
        if !missing.is_empty() {
            super::skip(&format!(
                "no {} (tests/registry/install.sh installs docker-registry, apache2-utils and openssl; \
                 tests/cri/up.sh runs it as root)",
                missing.join(", ")
            ));
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        // The port is free when asked for, not when the registry binds it: another tries again.
        for attempt in 1..=3 {
            let port = super::free_port();
            let out = Command::new("bash")
                .arg(scripts().join("setup.sh"))
                .arg(&dir)
                .arg(port.to_string())
                .args([USER, PASSWORD])
                .output()
                .unwrap();
            assert!(out.status.success(), "tests/registry/setup.sh: {}", String::from_utf8_lossy(&out.stderr));
            let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("registry.log")).unwrap();
            let mut command = Command::new("docker-registry");
            command.arg("serve").arg(dir.join("config.yml")).stdin(Stdio::null());
            command.stdout(log.try_clone().unwrap()).stderr(log);
            // Killed with the test too when that is killed (an interrupted `make test`) and
            // Drop never runs. The signal comes when the thread that started it ends: the
            // test's, which drops it first.
            // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
            unsafe {
                use std::os::unix::process::CommandExt;
                command.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = command.spawn().unwrap();
            let mut registry = Registry {
                user: USER.into(),
                password: PASSWORD.into(),
                dir: dir.clone(),
                port,
                child,
                trusted: Mutex::new(Vec::new()),
            };
            match registry.wait_ready() {
                Ok(()) => return Some(registry),
                Err(why) if attempt < 3 && why.contains("address already in use") => continue,
                Err(why) => panic!("docker-registry on 127.0.0.1:{port} did not come up: {why}"),
            }
        }
        unreachable!()
    }

    /// Waits until `GET /v2/` answers 401 (it asks for credentials) over TLS that the
    /// registry's CA verifies; `Err` with the end of its log when it exits or takes too long.
    fn wait_ready(&mut self) -> Result<(), String> {
        let agent = self.agent();
        let url = format!("https://{}/v2/", self.host());
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("it exited ({status}): {}", self.log_tail()));
            }
            match agent.get(&url).call() {
                Ok(resp) if resp.status().as_u16() == 401 => return Ok(()),
                Ok(resp) => last = format!("GET {url} answered {}", resp.status()),
                Err(e) => last = format!("GET {url}: {e}"),
            }
            if Instant::now() >= deadline {
                return Err(format!("no 401 within {START_TIMEOUT:?} ({last}): {}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// An HTTP client that trusts the registry's CA alone.
    fn agent(&self) -> ureq::Agent {
        use ureq::tls::{PemItem, RootCerts, TlsConfig};
        let pem = std::fs::read(self.ca_cert()).unwrap();
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i.unwrap() {
                PemItem::Certificate(c) => Some(c),
                _ => None,
            })
            .collect();
        let tls = TlsConfig::builder().root_certs(RootCerts::new_with_certs(&certs)).build();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(false)
            .build()
            .into()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// `127.0.0.1:PORT`, as image references name the registry.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The CA certificate (PEM) the registry's certificate is signed by.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Pushes the image in `image_tar` (`tests/cri/mkimage.py`'s output, either format) as
    /// `name:tag`, authenticated (`tests/registry/push.py`: its blobs, then its manifest);
    /// returns its reference, `127.0.0.1:PORT/name:tag`.
    pub fn push(&self, name: &str, tag: &str, image_tar: &Path) -> String {
        let out = Command::new("python3")
            .arg(scripts().join("push.py"))
            .args(["--registry", &self.host(), "--user", &self.user, "--password", &self.password])
            .arg("--ca")
            .arg(self.ca_cert())
            .args(["--image", &format!("{name}:{tag}")])
            .arg(image_tar)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "push of {} as {name}:{tag}: {}{}",
            image_tar.display(),
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
        format!("{}/{name}:{tag}", self.host())
    }

    /// Tells the containerd whose `config_path` is `certs_d` (the harness's:
    /// `$FERROLET_CRI_CERTS_D`) to reach this registry over TLS and trust its CA: writes
    /// `<certs_d>/127.0.0.1:PORT/hosts.toml`, which containerd reads at each pull (removed
    /// when the registry is dropped). Without it containerd 1.6 speaks plain HTTP to a
    /// registry on 127.0.0.1 or localhost.
    pub fn trust(&self, certs_d: &Path) {
        self.hosts_toml(certs_d, Some(&self.ca_cert()));
    }

    /// Writes this registry's `hosts.toml` under `certs_d`: over TLS, verified with `ca`
    /// (`None`: with the system's roots only, which do not hold this registry's CA).
    pub fn hosts_toml(&self, certs_d: &Path, ca: Option<&Path>) {
        let dir = certs_d.join(self.host());
        std::fs::create_dir_all(&dir).unwrap();
        let server = format!("https://{}", self.host());
        let mut text = format!("server = {server:?}\n\n[host.{server:?}]\n  capabilities = [\"pull\", \"resolve\"]\n");
        if let Some(ca) = ca {
            text += &format!("  ca = {:?}\n", ca.to_str().unwrap());
        }
        std::fs::write(dir.join("hosts.toml"), text).unwrap();
        self.trusted.lock().unwrap().push(dir);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for dir in self.trusted.lock().unwrap().drain(..) {
            let _ = std::fs::remove_dir_all(dir);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes an image tarball for this machine's architecture with `tests/cri/mkimage.py`
/// (`args`: its options but `--arch` and `--out`) to `out`. Its image id is its own (its
/// config has `FERROLET_TEST_IMAGE=<random>` in its environment): CRI's `RemoveImage`
/// removes every name of an image id, and the same files would otherwise make the id of
/// the harness's busybox or of another test's image.
pub fn mkimage(out: &Path, args: &[&str]) {
    let arch = Command::new("dpkg").arg("--print-architecture").output().unwrap();
    let arch = String::from_utf8(arch.stdout).unwrap();
    let unique = format!("FERROLET_TEST_IMAGE={}", ferrolet::base::random::random_id());
    let result = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cri/mkimage.py"))
        .args(args)
        .args(["--arch", arch.trim(), "--env", &unique])
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(result.status.success(), "mkimage.py {args:?}: {}", String::from_utf8_lossy(&result.stderr));
}
