//! The Kubernetes manifests of `deploy/kubernetes/`: every variant renders with `kubectl
//! kustomize` and validates against the Kubernetes schemas offline (scripts/kubernetes-render.py,
//! with the tools scripts/kubernetes-tools.sh installs from PyPI), and what the manifests say of
//! the server agrees with the server: the configuration they give it is valid, it listens on the
//! port the probes and the Service use, the probe paths answer, and the pod's grace period
//! covers the preStop wait, the server's shutdown grace and its final flush.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// After the grace period the server takes at most this long to write the last `RUN_ERROR`s and
/// exit (docs/deploy.md#operations, "Shutdown").
const SHUTDOWN_FLUSH_SECS: f64 = 2.0;

const VARIANTS: [&str; 4] = ["production", "redis", "redis-external", "single"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The render of every variant, made once for the tests of this file.
fn rendered() -> &'static Value {
    static RENDERED: OnceLock<Value> = OnceLock::new();
    RENDERED.get_or_init(|| {
        let tools = Command::new("bash")
            .arg(repo().join("scripts/kubernetes-tools.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/kubernetes-tools.sh runs");
        assert!(tools.status.success(), "the Kubernetes tools install");
        let tools = String::from_utf8(tools.stdout).expect("a path");
        let python = Path::new(tools.trim()).join("bin/python");
        let render = Command::new(python)
            .arg(repo().join("scripts/kubernetes-render.py"))
            .output()
            .expect("scripts/kubernetes-render.py runs");
        assert!(
            render.status.success(),
            "every variant renders and validates:\n{}",
            String::from_utf8_lossy(&render.stderr)
        );
        serde_json::from_slice(&render.stdout).expect("the render is JSON")
    })
}

fn objects(variant: &str) -> &'static [Value] {
    rendered()["variants"][variant]
        .as_array()
        .unwrap_or_else(|| panic!("no variant {variant}"))
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
}

fn get<'a>(variant: &str, kind: &str, name: &str) -> &'a Value
where
    'static: 'a,
{
    find(objects(variant), kind, name).unwrap_or_else(|| panic!("{variant}: no {kind}/{name}"))
}

/// The environment the manifests give the server: the ConfigMap, and the example Secret's keys.
fn server_environment(variant: &str) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        serde_json::from_value(get(variant, "ConfigMap", "agui-host")["data"].clone())
            .expect("string data");
    let secret: BTreeMap<String, String> =
        serde_json::from_value(rendered()["secret_example"]["stringData"].clone())
            .expect("string data");
    env.extend(secret);
    env
}

fn container(variant: &str) -> &'static Value {
    let deployment = find(objects(variant), "Deployment", "agui-host").expect("the Deployment");
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

/// Whether `selector` (a `matchLabels` or a Service's selector) picks pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("a selector");
    !selector.is_empty() && selector.iter().all(|(key, value)| labels[key] == *value)
}

#[test]
fn every_variant_renders_and_validates_against_the_kubernetes_schemas() {
    let variants: BTreeSet<&str> = rendered()["variants"]
        .as_object()
        .expect("variants")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(variants, BTreeSet::from(VARIANTS));

    for variant in VARIANTS {
        let objects = objects(variant);
        let deployment = get(variant, "Deployment", "agui-host");
        let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
        let store = &server_environment(variant)["APP_THREADS__STORE"];
        let replicas = deployment["spec"]["replicas"].as_u64().expect("replicas");
        let autoscaler = find(objects, "HorizontalPodAutoscaler", "agui-host");
        // Replicas of the memory store would not share threads or run logs.
        if replicas > 1 || autoscaler.is_some() {
            assert_eq!(store, "redis", "{variant}: several replicas need Redis");
            let budget = get(variant, "PodDisruptionBudget", "agui-host");
            assert!(selects(
                &budget["spec"]["selector"]["matchLabels"],
                pod_labels
            ));
        } else {
            assert_eq!(store, "memory", "{variant}");
        }
        // Keys and tokens are never in what the kustomizations apply.
        assert!(
            objects.iter().all(|object| object["kind"] != "Secret"),
            "{variant}: a Secret is rendered"
        );
        let env_from = container(variant)["envFrom"].as_array().expect("envFrom");
        assert!(env_from
            .iter()
            .any(|from| from["secretRef"]["name"] == "agui-host"));
        for (kind, selector) in [
            ("Service", "/spec/selector"),
            ("NetworkPolicy", "/spec/podSelector/matchLabels"),
        ] {
            let object = get(variant, kind, "agui-host");
            let selector = object.pointer(selector).expect("a selector");
            assert!(selects(selector, pod_labels), "{variant}: {kind} selector");
        }
    }

    for variant in ["redis", "redis-external", "production"] {
        let env = server_environment(variant);
        let url = env.get("APP_THREADS__REDIS_URL");
        if find(objects(variant), "Deployment", "agui-host-redis").is_some() {
            assert_eq!(
                url.map(String::as_str),
                Some("redis://agui-host-redis:6379")
            );
            let service = get(variant, "Service", "agui-host-redis");
            assert_eq!(service["spec"]["ports"][0]["port"], 6379);
        } else {
            assert!(
                url.is_none(),
                "{variant}: an external URL belongs in the Secret"
            );
        }
    }

    let autoscaler = get("production", "HorizontalPodAutoscaler", "agui-host");
    let metrics = autoscaler["spec"]["metrics"].as_array().expect("metrics");
    assert!(metrics
        .iter()
        .any(|metric| metric["resource"]["name"] == "cpu"));
    assert!(metrics
        .iter()
        .any(|metric| metric["pods"]["metric"]["name"] == "agui_runs_in_flight"));

    let ingress = get("production", "Ingress", "agui-host");
    let annotation = |key: &str| {
        ingress["metadata"]["annotations"][format!("nginx.ingress.kubernetes.io/{key}")]
            .as_str()
            .unwrap_or_else(|| panic!("the ingress has no {key}"))
            .to_owned()
    };
    assert_eq!(annotation("proxy-buffering"), "off");
    assert_eq!(annotation("proxy-next-upstream"), "off");
    let keep_alive = agui_host::Settings::embedded_default()
        .expect("defaults")
        .server
        .keep_alive_secs;
    for timeout in ["proxy-read-timeout", "proxy-send-timeout"] {
        let secs: u64 = annotation(timeout).parse().expect("seconds");
        assert!(secs >= 60 * keep_alive, "{timeout}: {secs}");
    }
}

#[test]
fn probes_ports_and_grace_periods_match_the_server() {
    let defaults = agui_host::Settings::embedded_default().expect("defaults");
    for variant in VARIANTS {
        let env = server_environment(variant);
        let container = container(variant);
        let port = &container["ports"][0];
        let (port_name, container_port) = (
            port["name"].as_str().expect("a named port"),
            port["containerPort"].as_u64().expect("a port"),
        );

        // The configuration loads and validates as the server would load it (production mode
        // included), and listens on the container port.
        let check = Command::new(env!("CARGO_BIN_EXE_agui-host"))
            .arg("check-config")
            .env_clear()
            .envs(&env)
            .current_dir(std::env::temp_dir())
            .output()
            .expect("check-config runs");
        let report = String::from_utf8_lossy(&check.stdout);
        assert!(
            check.status.success(),
            "{variant}: check-config refuses the manifests' configuration: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        assert!(
            report.contains(&format!("listening on 0.0.0.0:{container_port}\n")),
            "{variant}: the server listens on every interface, on the container port: {report}"
        );

        // Every probe targets that port by name, and the Service sends to it.
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            assert_eq!(
                container[probe]["httpGet"]["port"], port_name,
                "{variant}: {probe}"
            );
        }
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
        assert_eq!(container["startupProbe"]["httpGet"]["path"], "/health");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
        let service = get(variant, "Service", "agui-host");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], port_name);

        // The grace period covers preStop, the shutdown grace and the final flush.
        let grace: f64 = env
            .get("APP_SERVER__SHUTDOWN_GRACE_SECS")
            .map_or(defaults.server.shutdown_grace_secs, |secs| {
                secs.parse().expect("seconds")
            });
        let pre_stop = &container["lifecycle"]["preStop"]["exec"]["command"];
        assert_eq!(pre_stop[0], "sleep", "{variant}: preStop waits");
        let pre_stop: f64 = pre_stop[1]
            .as_str()
            .expect("seconds")
            .parse()
            .expect("seconds");
        let pod = &get(variant, "Deployment", "agui-host")["spec"]["template"]["spec"];
        let termination = pod["terminationGracePeriodSeconds"]
            .as_f64()
            .expect("terminationGracePeriodSeconds");
        assert!(
            termination >= pre_stop + grace + SHUTDOWN_FLUSH_SECS,
            "{variant}: terminationGracePeriodSeconds {termination} < preStop {pre_stop} + \
             shutdown grace {grace} + flush {SHUTDOWN_FLUSH_SECS}"
        );
        // The readiness probe notices a shutdown before the grace period is over.
        let readiness = &container["readinessProbe"];
        let noticed = readiness["periodSeconds"].as_f64().expect("period")
            * readiness["failureThreshold"].as_f64().expect("threshold");
        assert!(
            noticed < grace,
            "{variant}: readiness notices in {noticed} s"
        );
    }

    // The probe paths answer on the server the single variant configures (on loopback and a
    // free port rather than every interface and 8080), and SIGTERM stops it within the time
    // the pod gives it after preStop.
    let mut env = server_environment("single");
    env.insert("HOST".into(), "127.0.0.1".into());
    env.insert("PORT".into(), "0".into());
    let mut server = Command::new(env!("CARGO_BIN_EXE_agui-host"))
        .env_clear()
        .envs(&env)
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let address = listening_address(&mut server);
    let container = container("single");
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let path = container[probe]["httpGet"]["path"]
            .as_str()
            .expect("a path");
        // The Host a kubelet sends: the pod IP and port.
        let status = http_get(&address, "10.1.2.3:8080", path).0;
        assert_eq!(status, 200, "{probe} {path}");
    }
    // What Prometheus scrapes without a token, with the open-runs gauge the autoscaler reads.
    // (In the pod the server listens on every interface and answers any Host; here, on
    // loopback, only loopback names.)
    let (status, metrics) = http_get(&address, "localhost", "/metrics");
    assert_eq!(status, 200);
    let autoscaler = get("production", "HorizontalPodAutoscaler", "agui-host");
    let open_runs = autoscaler
        .pointer("/spec/metrics/1/pods/metric/name")
        .and_then(Value::as_str)
        .expect("the open-runs metric");
    assert!(
        metrics.contains(&format!("\n{open_runs} ")),
        "/metrics serves {open_runs}: {metrics}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let budget = Duration::from_secs_f64(
        defaults.server.shutdown_grace_secs.max(
            env["APP_SERVER__SHUTDOWN_GRACE_SECS"]
                .parse()
                .expect("seconds"),
        ) + SHUTDOWN_FLUSH_SECS,
    );
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = server.try_wait().expect("the server's status") {
            break status;
        }
        if stopping.elapsed() > budget {
            let _ = server.kill();
            panic!("the server did not stop within {budget:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "a clean stop: {status}");
}

/// The address of the server's `agui-host listening` JSON log line.
fn listening_address(server: &mut std::process::Child) -> String {
    let stdout = server.stdout.take().expect("a piped stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server logs that it listens");
        if line.contains("agui-host listening") {
            let line: Value = serde_json::from_str(&line).expect("a JSON log line");
            return line["address"].as_str().expect("an address").to_owned();
        }
    }
}

/// The status and body of `GET path` over a plain HTTP/1.1 connection.
fn http_get(address: &str, host: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("sends");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("reads");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    (status, response)
}
