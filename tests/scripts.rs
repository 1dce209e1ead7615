//! The scripts behind `make run` (docker/server.sh) and `make cluster` / `make cluster-stop`
//! (docker/cluster.sh), which the Docker images run too: run for real on free ports.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::ClusterClient;
use common::{free_port, Conn, Value};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docker")
        .join(name)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redis-ctr-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The foreground server started by server.sh; killed if the test fails before stopping it.
struct Foreground(Child);

impl Drop for Foreground {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[test]
fn server_sh_runs_the_server_with_the_module_and_its_arguments() {
    let dir = temp_dir("run");
    let port = free_port();
    let child = Command::new("sh")
        .arg(script("server.sh"))
        .arg(port.to_string())
        .arg(&dir)
        .args(["--save", "", "--logfile", "server.log"])
        .env("MODULE_ARGS", "max-shards 8 token-window-ms 600000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Foreground(child);
    let mut c = wait_for("the server", || Conn::connect(port).ok());
    // exec: the process we started is the server itself.
    let pid = c.q("INFO server").text();
    assert!(
        pid.contains(&format!("process_id:{}\r", server.0.id())),
        "{pid}"
    );
    assert!(c.q("MODULE LIST").flat_text().contains("name ctr"));
    assert_eq!(c.q("CONFIG GET ctr.max-shards").array()[1].text(), "8");
    assert_eq!(
        c.q("CONFIG GET ctr.token-window-ms").array()[1].text(),
        "600000"
    );
    let got = PathBuf::from(c.q("CONFIG GET dir").array()[1].text());
    assert_eq!(got.canonicalize().unwrap(), dir.canonicalize().unwrap());
    assert_eq!(c.q("CTR.ADD k 2"), Value::Int(2));
    c.send(&["SHUTDOWN", "NOSAVE"]);
    let status = wait_for("the server to exit", || server.0.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
    assert!(std::fs::read_to_string(dir.join("server.log"))
        .unwrap()
        .contains("Module 'ctr' loaded"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// CLUSTER_DIR for cluster.sh; `stop` runs again on drop so a failed test leaves no node.
struct ClusterDir(PathBuf);

impl ClusterDir {
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new("sh")
            .arg(script("cluster.sh"))
            .args(args)
            .env("CLUSTER_DIR", &self.0)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn pid_of(&self, port: u16) -> u32 {
        let pid = std::fs::read_to_string(self.0.join(port.to_string()).join("redis.pid"));
        pid.unwrap().trim().parse().unwrap()
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = std::fs::read_dir(&self.0)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("redis.pid")).ok())
            .map(|p| p.trim().parse().unwrap())
            .collect();
        pids.sort();
        pids
    }
}

impl Drop for ClusterDir {
    fn drop(&mut self) {
        self.run(&["stop"]);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn cluster_sh_starts_three_masters_and_stops_only_the_nodes_it_started() {
    let dir = ClusterDir(temp_dir("cluster"));
    let ports: Vec<String> = (0..3).map(|_| free_port().to_string()).collect();
    let mut args = vec!["start"];
    args.extend(ports.iter().map(String::as_str));
    let out = dir.run(&args);
    assert!(out.status.success(), "{}", text(&out));
    let hint = format!("redis-cli -c -p {}", ports[0]);
    assert!(text(&out).contains(&hint), "{}", text(&out));
    let pids = dir.pids();
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|&p| alive(p)));

    // A working cluster with the module on every master; `redis-cli -c` as printed.
    let seed: u16 = ports[0].parse().unwrap();
    let mut client = ClusterClient::connect(seed);
    for i in 0..60 {
        assert_eq!(
            client.cmd(&["CTR.ADD", &format!("k{i}"), "1"]),
            Value::Int(1)
        );
    }
    for port in &ports {
        let mut c = Conn::connect(port.parse().unwrap()).unwrap();
        assert!(c.q("CLUSTER INFO").text().contains("cluster_state:ok"));
        assert!(c.q("DBSIZE").int() > 0, "node {port} holds some counters");
    }
    let cli = Command::new("redis-cli")
        .args(["-c", "-p", &ports[0], "CTR.MGET", "{t}a", "{t}b"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cli.stdout), "0\n0\n");

    // Starting again changes nothing: the same processes, the same cluster.
    let again = dir.run(&args);
    assert!(text(&again).contains("already running"), "{}", text(&again));
    assert!(text(&again).contains("already form a cluster"));
    assert_eq!(dir.pids(), pids);

    // A replica of the first master (bench/spread.sh reads through one), stopped with the rest.
    let replica_port = free_port().to_string();
    let out = dir.run(&["replica", &replica_port, &ports[0]]);
    assert!(out.status.success(), "{}", text(&out));
    let mut replica = Conn::connect(replica_port.parse().unwrap()).unwrap();
    let replication = replica.q("INFO replication").text();
    assert!(replication.contains("role:slave"), "{replication}");
    assert!(
        replication.contains("master_link_status:up"),
        "{replication}"
    );
    let pids = dir.pids();
    assert_eq!(pids.len(), 4);

    // A stale pid file naming a live process that is not a node of ours: left alone.
    let mut bystander = Command::new("sleep").arg("60").spawn().unwrap();
    let stale = dir.0.join("1");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("redis.pid"), bystander.id().to_string()).unwrap();

    let out = dir.run(&["stop"]);
    assert!(out.status.success(), "{}", text(&out));
    for port in ports.iter().chain([&replica_port]) {
        assert!(text(&out).contains(&format!("node {port} stopped")));
    }
    assert!(pids.iter().all(|&p| !alive(p)), "every node exited");
    assert!(
        alive(bystander.id()),
        "an unrelated process is never signalled"
    );
    assert!(
        !stale.join("redis.pid").exists(),
        "the stale pid file is gone"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    assert!(text(&dir.run(&["stop"])).contains("no running node"));
}

/// What docker/compose.cluster.yml runs: three `cluster.sh node` processes in the foreground,
/// then `cluster.sh create`; run twice, as on a second `docker compose up`.
#[test]
fn cluster_sh_node_and_create_form_the_compose_cluster() {
    let dir = temp_dir("compose");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<Foreground> = ports
        .iter()
        .map(|port| {
            let data = dir.join(port.to_string());
            let child = Command::new("sh")
                .arg(script("cluster.sh"))
                .args(["node", &port.to_string()])
                .arg(&data)
                .args(["--bind", "127.0.0.1", "--save", "", "--logfile", "node.log"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Foreground(child)
        })
        .collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let create = || {
        Command::new("sh")
            .arg(script("cluster.sh"))
            .arg("create")
            .args(&addrs)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // `create` waits for the nodes to answer: no wait here, as in compose.
    let out = create();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("[OK] All 16384 slots covered."),
        "{}",
        text(&out)
    );
    let again = create();
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("already form a cluster"));

    let mut client = ClusterClient::connect(ports[1]);
    for i in 0..30 {
        assert_eq!(
            client.cmd(&["PNC.ADD", &format!("p{i}"), "2"]),
            Value::Int(2)
        );
    }
    for (port, mut node) in ports.iter().zip(nodes) {
        let mut c = Conn::connect(*port).unwrap();
        assert!(c.q("CLUSTER INFO").text().contains("cluster_known_nodes:3"));
        c.send(&["SHUTDOWN", "NOSAVE"]);
        let status = wait_for("a node to exit", || node.0.try_wait().unwrap());
        assert!(status.success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Docker files run the scripts tested above, with the ports `make run` and `make cluster`
/// use by default.
#[test]
fn docker_files_run_the_tested_scripts() {
    let read = |name: &str| std::fs::read_to_string(script(name)).unwrap();
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains("COPY docker/server.sh docker/cluster.sh /usr/local/lib/redis-ctr/")
    );
    assert!(dockerfile.contains("ENV CTR_MODULE=/usr/local/lib/redis-ctr/libredis_ctr.so"));
    assert!(dockerfile.contains(
        r#"CMD ["sh", "/usr/local/lib/redis-ctr/server.sh", "6379", "/data", "--protected-mode", "no"]"#
    ));
    let compose = read("compose.cluster.yml");
    let makefile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Makefile")).unwrap();
    assert!(makefile.contains("CLUSTER_PORTS ?= 7000 7001 7002"));
    assert!(makefile.contains("sh docker/cluster.sh start $(CLUSTER_PORTS)"));
    // `make cluster CLUSTER_REPLICAS=1` (README) reaches cluster.sh as REPLICAS.
    assert!(makefile.contains("CLUSTER_REPLICAS ?= 0"));
    assert!(makefile.contains("REPLICAS=$(CLUSTER_REPLICAS) sh docker/cluster.sh start"));
    assert!(makefile.contains("sh docker/server.sh $(PORT)"));
    for port in ["7000", "7001", "7002"] {
        assert!(compose.contains(&format!(
            r#"["sh", "/usr/local/lib/redis-ctr/cluster.sh", "node", "{port}", "/data", "--bind", "127.0.0.1"]"#
        )));
    }
    assert!(compose.contains(
        r#"["sh", "/usr/local/lib/redis-ctr/cluster.sh", "create", "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]"#
    ));
    assert!(read("compose.yml").contains("dockerfile: docker/Dockerfile"));
}

/// `n` consecutive free ports (with their bus ports): `start` puts replicas on the ports after
/// the last master's. Taken below Linux's ephemeral range (32768 and up), from which every
/// other test's `free_port` draws: ports next to one it handed out are the likeliest it hands
/// out next, and a node that lost its port to another test's server would fail this one.
fn free_run(n: u16) -> u16 {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = common::Lcg(seed);
    loop {
        // Bus ports (+10000) below the range too.
        let base = 20_000 + rng.next(2_700) as u16;
        if base + n < 55535
            && (0..n).all(|i| {
                std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                    && std::net::TcpListener::bind(("127.0.0.1", base + i + 10000)).is_ok()
            })
        {
            return base;
        }
    }
}

fn role(port: u16) -> String {
    let info = Conn::connect(port).map(|mut c| c.q("INFO replication").text());
    info.unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("role:").map(str::to_string))
        .unwrap_or_default()
}

/// Issue 38, item 9: `make cluster` after a failover waited 35 s for the node count it started
/// with (a replica makes more), said only "the cluster is not ok", and left its nodes running.
/// A cluster with a replica per master (REPLICAS=1), its first master killed and replaced by
/// its replica: starting it again brings the old master back as a replica and says so.
#[test]
fn cluster_sh_starts_again_after_a_failover() {
    let dir = ClusterDir(temp_dir("cluster-failover"));
    let base = free_run(6);
    let ports: Vec<String> = (base..base + 3).map(|p| p.to_string()).collect();
    let mut args = vec!["start"];
    args.extend(ports.iter().map(String::as_str));
    let out = dir.run_with(&args, &[("REPLICAS", "1")]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(dir.pids().len(), 6, "3 masters, 3 replicas: {}", text(&out));
    let replica_of_first = base + 3;
    assert_eq!(role(replica_of_first), "slave", "{}", text(&out));

    // kill -9 of the first master (a process this test started, by its pid): its replica
    // takes over after the node timeout.
    let first = dir.pid_of(base);
    Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    wait_for("the replica's promotion", || {
        (role(replica_of_first) == "master").then_some(())
    });

    let out = dir.run_with(&args, &[("REPLICAS", "1"), ("CLUSTER_WAIT_S", "20")]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("redis-ctr cluster is up"), "{said}");
    assert!(
        said.contains(&format!("node {replica_of_first} already in the cluster")),
        "{said}"
    );
    wait_for("the old master to follow its replica", || {
        (role(base) == "slave").then_some(())
    });
    let mut c = ClusterClient::connect(base + 1);
    assert_eq!(c.cmd(&["CTR.ADD", "after-failover", "1"]), Value::Int(1));
}

/// A cluster that cannot be ok (a master down, no replica to take over): `start` says what is
/// wrong within CLUSTER_WAIT_S and stops the nodes it started itself.
#[test]
fn cluster_sh_says_why_the_cluster_is_not_ok_and_stops_what_it_started() {
    let dir = ClusterDir(temp_dir("cluster-broken"));
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let names: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut args = vec!["start"];
    args.extend(names.iter().map(String::as_str));
    let out = dir.run(&args);
    assert!(out.status.success(), "{}", text(&out));
    // The third master dies for good; the others mark it failed.
    let third = dir.pid_of(ports[2]);
    Command::new("kill")
        .args(["-9", &third.to_string()])
        .status()
        .unwrap();
    // Its ports stay taken, so that no server of a test running beside this one answers there
    // with another name (a node would then know the dead one only as noaddr, without address).
    let _held_ports: Vec<TcpListener> = [ports[2], ports[2] + 10000]
        .iter()
        .filter_map(|p| TcpListener::bind(("127.0.0.1", *p)).ok())
        .collect();
    wait_for("the cluster to fail", || {
        let mut c = Conn::connect(ports[0]).ok()?;
        c.q("CLUSTER INFO")
            .text()
            .contains("cluster_state:fail")
            .then_some(())
    });
    // The second master stops cleanly, then `start` of the first two brings it back.
    let second = dir.pid_of(ports[1]);
    Command::new("redis-cli")
        .args(["-p", &names[1], "SHUTDOWN", "NOSAVE"])
        .output()
        .unwrap();
    wait_for("the second master to exit", || {
        (!alive(second)).then_some(())
    });
    let out = dir.run_with(&args[..3], &[("CLUSTER_WAIT_S", "3")]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("the cluster is not ok after 3 s"), "{said}");
    assert!(said.contains("cluster_state fail"), "{said}");
    assert!(
        said.contains(&format!("127.0.0.1:{} is down", ports[2])),
        "{said}"
    );
    assert!(said.contains("uncovered"), "{said}");
    assert!(
        said.contains(&format!(
            "stopping the nodes this call started: {}",
            ports[1]
        )),
        "{said}"
    );
    assert!(
        !dir.0.join(&names[1]).join("redis.pid").exists(),
        "its pid file is gone with it"
    );
    assert!(
        Conn::connect(ports[1]).is_err(),
        "the node it started is stopped"
    );
    assert!(
        Conn::connect(ports[0]).is_ok(),
        "the node it found running is left running"
    );
}

/// The `command:` list of docker/compose.yml, its quotes removed and `${CTR_PASSWORD...}`
/// given `password`, as Docker Compose would pass it.
fn compose_command(password: &str) -> Vec<String> {
    let compose = std::fs::read_to_string(script("compose.yml")).unwrap();
    compose
        .lines()
        .skip_while(|l| l.trim() != "command:")
        .skip(1)
        .map_while(|l| l.strip_prefix("      - "))
        .map(|word| {
            let word = word.trim_matches('"');
            match (word.find("${CTR_PASSWORD"), word.find('}')) {
                (Some(start), Some(end)) => {
                    format!("{}{password}{}", &word[..start], &word[end + 1..])
                }
                _ => word.to_string(),
            }
        })
        .collect()
}

/// Issue 38 (friction): docker/compose.yml published 6379 on every interface with protected
/// mode off and no password. It publishes on 127.0.0.1 alone, turns the default user off, and
/// its ACL user `app` runs the counters: its command line run here through server.sh.
#[test]
fn compose_yml_publishes_on_localhost_with_an_acl_user() {
    let compose = std::fs::read_to_string(script("compose.yml")).unwrap();
    assert!(compose.contains(r#"- "127.0.0.1:6379:6379""#), "{compose}");
    assert!(!compose.contains(r#"- "6379:6379""#));
    let command = compose_command("s3cret");
    assert_eq!(
        &command[..4],
        ["sh", "/usr/local/lib/redis-ctr/server.sh", "6379", "/data"]
    );
    let dir = temp_dir("compose-acl");
    let port = free_port().to_string();
    let mut server = Command::new("sh")
        .arg(script("server.sh"))
        .args([port.as_str(), dir.to_str().unwrap()])
        .args(&command[4..])
        .args(["--bind", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let port: u16 = port.parse().unwrap();
    let mut anonymous = wait_for("the server", || Conn::connect(port).ok());
    assert!(anonymous.q("CTR.ADD k 1").error().starts_with("NOAUTH"));
    let mut app = Conn::connect(port).unwrap();
    assert_eq!(app.q("AUTH app s3cret"), Value::Simple("OK".into()));
    assert_eq!(app.q("CTR.ADD k 2"), Value::Int(2));
    assert_eq!(app.q("CTR.GET k"), Value::Int(2));
    assert_eq!(app.q("SET plain 1"), Value::Simple("OK".into()));
    assert!(app
        .q("CONFIG SET maxmemory 1")
        .error()
        .starts_with("NOPERM"));
    server.kill().unwrap();
    server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
