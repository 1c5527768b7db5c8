//! What every kind of test here repeats, in one place: free loopback ports,
//! the one wait ([`wait_for`]), the one admin request ([`http_get`]),
//! starting a child process that logs to a file and dies with the test,
//! creating a namespace or any object if absent, and the named trials of a
//! `harness = false` test ([`trials`]).
//!
//! Needs no `testenv` binaries, so tier-1 tests use it too. Every test
//! crate that declares `mod dns_server;` or `mod controlplane;` also declares
//! `mod support;` (both use `crate::support`, and re-export the parts their
//! users call).
#![allow(dead_code)] // each test crate uses a different subset

use std::future::Future;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound and released).
///
/// The port comes from below the kernel's ephemeral range
/// (`ip_local_port_range`): a port that `bind(0)` hands out is also one
/// that any process's next outbound connection may take before the server
/// meant to listen on it has started (a kube-controller-manager failed
/// with "address already in use" that way). Below the range only listeners
/// compete; each candidate is bound once to check it is free.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u32, ephemeral_low.max(10_001));
    let span = high - low;
    // Spread processes apart (tests in other binaries, a bench), then walk.
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = (low + offset) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {low}..{high}")
}

/// A port free for both UDP and TCP on 127.0.0.1 (a DNS server's), from
/// the same range as [`free_port`].
pub(crate) fn free_udp_and_tcp_port() -> u16 {
    loop {
        let port = free_port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Calls `check` until it returns `Ok`, for at most `timeout` (at least
/// once): every 10 ms at first, then less often, up to every 100 ms (a
/// loopback server answers within the first polls; an apiserver is not
/// asked more than ten times a second). `Err` carries `check`'s last
/// explanation of what is still missing; the callers decide how to fail
/// with it.
pub(crate) async fn poll_until<T, F, Fut>(timeout: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut every = Duration::from_millis(10);
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(why) => why,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(last);
        }
        tokio::time::sleep(every.min(deadline - now)).await;
        every = (every * 2).min(Duration::from_millis(100));
    }
}

/// Waits until `check` returns `Ok` (its value), polling as
/// [`poll_until`] does for at most `timeout`; panics (failing the test)
/// naming `what` with `check`'s last explanation on timeout. The one wait
/// of the tests: a condition that is not a `Result` gives one with
/// `ok_or` (`Option`) or `then_some(()).ok_or(..)` (`bool`).
pub(crate) async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    poll_until(timeout, check)
        .await
        .unwrap_or_else(|last| panic!("{what}: not done in {timeout:?}; last: {last}"))
}

/// A typed object from a test's JSON literal (a Service, a slice, an
/// export); panics on a literal that does not decode.
pub(crate) fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The sum of the samples of metric `name` on the admin endpoint at
/// `admin` whose labels contain every one of `labels`; 0 when there is
/// none (a counter not yet incremented) or nothing answers.
pub(crate) async fn counter(admin: SocketAddr, name: &str, labels: &[&str]) -> f64 {
    http_get(admin, "/metrics")
        .await
        .1
        .lines()
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How long [`http_get`] waits for a whole response.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET path` on `admin` (an admin endpoint, HTTP/1.1, `Connection:
/// close`): the status code and the body. The one HTTP request of the
/// tests: status 0 when nothing answers within [`HTTP_TIMEOUT`] or the
/// response is not HTTP, the body then saying what went wrong, so that a
/// caller polling a server that is not up yet keeps polling and one that
/// asserts a status fails with the reason.
pub(crate) async fn http_get(admin: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(admin)
            .await
            .map_err(|e| format!("connecting to {admin}: {e}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending GET {path}: {e}"))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| format!("reading the response to GET {path}: {e}"))?;
        Ok::<_, String>(response)
    };
    let response = match tokio::time::timeout(HTTP_TIMEOUT, exchange).await {
        Ok(Ok(response)) => response,
        Ok(Err(why)) => return (0, why),
        Err(_) => {
            return (
                0,
                format!("GET {path} on {admin}: no response in {HTTP_TIMEOUT:?}"),
            );
        }
    };
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        return (0, format!("GET {path}: not an HTTP response: {response:?}"));
    };
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// The body of `GET path` on `admin`, which must answer 200.
pub(crate) async fn http_ok(admin: SocketAddr, path: &str) -> String {
    let (status, body) = http_get(admin, path).await;
    assert_eq!(status, 200, "GET {path} on {admin}: {body}");
    body
}

/// Creates `object` through `api` unless an object of its name exists
/// already (a setup that an earlier trial, or an earlier attempt of this
/// one, did); panics on any other error.
pub(crate) async fn create_if_absent<K>(api: &kube::Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    match api.create(&kube::api::PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!(
            "creating {} {}: {e}",
            K::kind(&Default::default()),
            object.meta().name.as_deref().unwrap_or_default()
        ),
    }
}

/// ServiceImport `ns/name` in the cluster of `client`, `None` when there
/// is none; panics when the apiserver does not answer.
pub(crate) async fn import(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<clusterset_dns::api::ServiceImport> {
    kube::Api::<clusterset_dns::api::ServiceImport>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading ServiceImport {ns}/{name}: {e}"))
}

/// Makes the child of `command` get SIGKILL when this process dies
/// (`PR_SET_PDEATHSIG`), so even a killed test run leaks no processes.
/// Strictly, when the thread that spawns it ends: a child that must
/// outlive its test thread is spawned from a kept one
/// ([`trials::group`]). With
/// `own_group`, it also leads a process group of its own (to kill it with
/// what it starts).
pub(crate) fn dies_with_this_process(command: &mut Command, own_group: bool) {
    #[allow(unsafe_code)]
    // SAFETY: setpgid and prctl are async-signal-safe and touch no memory
    // of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            if own_group {
                libc::setpgid(0, 0);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Starts `command` with stdin from /dev/null, stdout and stderr to a new
/// file `log`, dying with this process ([`dies_with_this_process`], in a
/// process group of its own with `own_group`); panics naming the program
/// if it cannot start.
pub(crate) fn spawn_logged_command(command: &mut Command, log: &Path, own_group: bool) -> Child {
    let file = std::fs::File::create(log)
        .unwrap_or_else(|e| panic!("creating log {}: {e}", log.display()));
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone the log's handle"))
        .stderr(file);
    dies_with_this_process(command, own_group);
    command.spawn().unwrap_or_else(|e| {
        panic!(
            "starting {} {:?}: {e}",
            command.get_program().to_string_lossy(),
            command.get_args().collect::<Vec<_>>()
        )
    })
}

/// Creates namespace `name`; one that exists already is fine (a trial run
/// again on the same clusters, or two steps sharing it).
pub(crate) async fn create_namespace(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    create_if_absent(
        &kube::Api::<Namespace>::all(client.clone()),
        &object(serde_json::json!({"metadata": {"name": name}})),
    )
    .await;
}

/// CPU time a process has used so far (utime + stime of `/proc/<pid>/stat`,
/// read after the command name, which may hold spaces), in clock ticks of
/// 10 ms; 0 for a process that is gone.
pub(crate) fn process_cpu_ticks(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = text.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the comm: state(0) ppid(1) … utime(11) stime(12).
    fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)
}

/// A `kB` field of `/proc/<pid>/status` (`"VmRSS:"`, `"VmHWM:"`,
/// `"RssAnon:"`, `"RssFile:"`) in KiB; 0 for a process that is gone.
pub(crate) fn process_status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// Behaviours that share an expensive environment, as named trials of a
/// `harness = false` test (libtest-mimic). A trial is named after its
/// function ([`behaviours!`], [`standalone!`]) and passes run alone
/// (`-- --exact <trial>`): what it observes, it sets up if no earlier
/// trial did (idempotent setup, or a `tokio::sync::OnceCell` of the
/// environment), and what it changes is its own (a namespace of its own).
pub(crate) mod trials {
    use std::future::Future;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use libtest_mimic::{Arguments, Failed, Trial};
    use tokio::runtime::Runtime;

    /// One behaviour: a trial named after it, run on the shared `E`.
    pub(crate) type Behaviour<E> = for<'a> fn(&'a mut E) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

    /// `(name, behaviour)` for each async fn given, its name its function's
    /// (`stringify!`): `behaviours![a_thing_happens, another_one]` for
    /// [`group`]. Each fn takes the shared environment (`&E` or `&mut E`).
    /// A trial has one name, its function's; there is no table to keep.
    #[allow(unused_macros)] // each test crate uses a different subset
    macro_rules! behaviours {
        ($($behaviour:ident),+ $(,)?) => {
            vec![$((
                stringify!($behaviour),
                $crate::support::trials::behaviour(|environment| {
                    Box::pin($behaviour(environment))
                }),
            )),+]
        };
    }
    #[allow(unused_imports)] // each test crate uses a different subset
    pub(crate) use behaviours;

    /// `(name, test)` for each async fn given, taking nothing, named by its
    /// function: `standalone![a_thing_happens]` for [`alone`].
    #[allow(unused_macros)] // each test crate uses a different subset
    macro_rules! standalone {
        ($($test:ident),+ $(,)?) => {
            vec![$((
                stringify!($test),
                $crate::support::trials::test(|| Box::pin($test())),
            )),+]
        };
    }
    #[allow(unused_imports)] // each test crate uses a different subset
    pub(crate) use standalone;

    /// `behaviour` as a [`Behaviour`] (for [`behaviours!`], which gives
    /// the closure its type through this).
    pub(crate) fn behaviour<E>(behaviour: Behaviour<E>) -> Behaviour<E> {
        behaviour
    }

    /// `test` as an [`Alone`] (for [`standalone!`]).
    pub(crate) fn test(test: Alone) -> Alone {
        test
    }
    /// Starts the environment a group of behaviours shares.
    pub(crate) type Start<E> = fn() -> Pin<Box<dyn Future<Output = E>>>;

    /// The arguments, run one trial at a time: trials share an
    /// environment and a runtime, and their timings should not compete.
    pub(crate) fn serial_arguments() -> Arguments {
        Arguments {
            test_threads: Some(1),
            ..Arguments::from_args()
        }
    }

    /// Whether `args` selects the trial `name` (its filter and `--skip`).
    pub(crate) fn selected(args: &Arguments, name: &str) -> bool {
        let matches = |f: &str| {
            if args.exact {
                name == f
            } else {
                name.contains(f)
            }
        };
        !args.list
            && args.filter.as_deref().is_none_or(matches)
            && !args.skip.iter().any(|s| matches(s))
    }

    struct Group<E> {
        environment: Mutex<Option<E>>,
        /// The thread that started the environment, kept until it is
        /// dropped.
        keeper: Mutex<Option<Keeper>>,
        /// Selected trials of the group not yet finished.
        left: AtomicUsize,
        start: Start<E>,
        started: Instant,
    }

    /// `behaviours` as trials, in this order, on one `E` that `start` makes
    /// when the first selected one runs and that is dropped when the last
    /// selected one ends, so that two groups never run at once. A trial
    /// that panics fails under its name; the ones after it still run on
    /// the same environment. Each prints how long it took and when it ended
    /// (seconds since the trials were made). The environment is started
    /// on a thread kept until it is dropped, so its processes outlive the
    /// test thread that ran the first trial; processes a behaviour starts
    /// itself die with its test thread, so groups whose behaviours do run
    /// with [`serial_arguments`] (one thread, the main one).
    pub(crate) fn group<E: Send + 'static>(
        args: &Arguments,
        runtime: &Arc<Runtime>,
        start: Start<E>,
        behaviours: Vec<(&'static str, Behaviour<E>)>,
    ) -> Vec<Trial> {
        let group = Arc::new(Group {
            environment: Mutex::new(None),
            keeper: Mutex::new(None),
            left: AtomicUsize::new(
                behaviours
                    .iter()
                    .filter(|(name, _)| selected(args, name))
                    .count(),
            ),
            start,
            started: Instant::now(),
        });
        behaviours
            .into_iter()
            .map(|(name, behaviour)| {
                let (group, runtime) = (group.clone(), runtime.clone());
                Trial::test(name, move || {
                    let outcome = catch_unwind(AssertUnwindSafe(|| {
                        let mut environment =
                            group.environment.lock().unwrap_or_else(|e| e.into_inner());
                        let environment = environment.get_or_insert_with(|| {
                            let t0 = Instant::now();
                            let (made, keeper) = start_kept(&runtime, group.start);
                            *group.keeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(keeper);
                            eprintln!("environment ready in {:.1} s", t0.elapsed().as_secs_f64());
                            made
                        });
                        let t0 = Instant::now();
                        runtime.block_on(behaviour(environment));
                        eprintln!(
                            "{name} done in {:.1} s, at {:.1} s",
                            t0.elapsed().as_secs_f64(),
                            group.started.elapsed().as_secs_f64()
                        );
                    }));
                    if group.left.fetch_sub(1, Ordering::SeqCst) == 1 {
                        let last = group
                            .environment
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .take();
                        let _inside = runtime.enter();
                        drop(last);
                        let keeper = group
                            .keeper
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .take();
                        if let Some(Keeper { stop, thread }) = keeper {
                            drop(stop);
                            let _ = thread.join();
                        }
                        eprintln!(
                            "environment of {name} stopped after {:.1} s",
                            group.started.elapsed().as_secs_f64()
                        );
                    }
                    if let Err(panic) = outcome {
                        resume_unwind(panic);
                    }
                    Ok::<(), Failed>(())
                })
            })
            .collect()
    }

    /// A test that starts what it needs itself.
    pub(crate) type Alone = fn() -> Pin<Box<dyn Future<Output = ()>>>;

    /// `tests` as trials, each on a multi-thread runtime of its own, as
    /// `#[tokio::test(flavor = "multi_thread")]` runs a test: they may run
    /// beside each other and beside a [`group`].
    pub(crate) fn alone(tests: Vec<(&'static str, Alone)>) -> Vec<Trial> {
        tests
            .into_iter()
            .map(|(name, test)| {
                Trial::test(name, move || {
                    runtime().block_on(test());
                    Ok(())
                })
            })
            .collect()
    }

    /// A thread kept alive while an environment it started lives: a
    /// child process dies with the thread that spawned it
    /// (`PR_SET_PDEATHSIG`, [`super::dies_with_this_process`]), and the
    /// test threads of a parallel run end when no trial is left for them,
    /// while the group's later trials still need its processes.
    struct Keeper {
        /// Dropped to let the thread end.
        stop: std::sync::mpsc::Sender<()>,
        thread: std::thread::JoinHandle<()>,
    }

    /// `start`'s environment, made on a [`Keeper`] thread; a panic while
    /// starting is the caller's.
    fn start_kept<E: Send + 'static>(runtime: &Arc<Runtime>, start: Start<E>) -> (E, Keeper) {
        let (made_tx, made) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let runtime = runtime.clone();
        let thread = std::thread::spawn(move || {
            if made_tx.send(runtime.block_on(start())).is_ok() {
                // Until the group drops `stop`.
                let _ = stopped.recv();
            }
        });
        match made.recv() {
            Ok(made) => (made, Keeper { stop, thread }),
            Err(_) => match thread.join() {
                Err(panic) => resume_unwind(panic),
                Ok(()) => panic!("the environment's thread ended without it"),
            },
        }
    }

    /// A multi-thread runtime for [`group`]: the environment's in-process
    /// servers keep answering between `block_on`s.
    pub(crate) fn runtime() -> Arc<Runtime> {
        Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
        )
    }
}
