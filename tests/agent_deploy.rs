//! The agent's deployment files (deploy/), each checked by the tool that reads it:
//! `systemd-analyze verify` for the unit, `kubernetes-validate --strict` (the
//! Kubernetes OpenAPI schemas, bundled) for the DaemonSet, `promtool check config` for
//! the Prometheus configs, Python's YAML and TOML parsers for the rest. Beside the
//! tools' verdicts, the lines that make the deployment least-privilege are asserted, so
//! an edit that drops one fails here; each tool is also shown a broken copy, so a check
//! that cannot fail would be noticed.
//!
//! Without a tool a test prints why and passes, except under CI (`CI` set), where that
//! is a failure (`cargo xtask ci` installs systemd, promtool and kubernetes-validate).

#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The capabilities the unit and the DaemonSet grant (docs/AGENT.md says why each).
const CAPABILITIES: &[&str] = &[
    "BPF",
    "PERFMON",
    "SYS_PTRACE",
    "DAC_READ_SEARCH",
    "CHECKPOINT_RESTORE",
    "SETUID",
    "SETGID",
    "SYSLOG",
];

/// Lines of the unit that keep it least-privilege.
const UNIT_HARDENING: &[&str] = &[
    "DynamicUser=yes",
    "NoNewPrivileges=yes",
    "LimitMEMLOCK=infinity",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "ReadOnlyPaths=/proc",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces=yes",
    "MemoryDenyWriteExecute=yes",
    "SystemCallFilter=~ptrace process_vm_writev",
    "MemoryMax=1G",
    "Restart=on-failure",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn deploy(path: &str) -> PathBuf {
    repo().join("deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `Some(())` when `tool` can run; otherwise prints why and returns `None` (a failure
/// under CI: `skip::required`).
fn tool_ready(test: &str, ok: bool, what: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    skip::required(
        test,
        &format!("{what} is missing (cargo xtask ci installs it)"),
    );
    None
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) -> Output {
    let line = format!("{cmd:?}");
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {line}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The unit with ExecStart pointed at the binary cargo built (verify checks that the
/// binary exists), every other line as shipped.
fn unit_with_built_binary() -> String {
    let unit = read(&deploy("systemd/kernelkite-agent.service"));
    let exec = "ExecStart=/usr/bin/kernelkite ";
    assert_eq!(
        unit.matches(exec).count(),
        1,
        "one ExecStart of /usr/bin/kernelkite"
    );
    unit.replace(
        exec,
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_kernelkite")),
    )
}

/// `systemd-analyze verify` of `unit` written as kernelkite-agent.service in a temp dir.
fn verify_unit(unit: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernelkite-agent.service");
    std::fs::write(&path, unit).unwrap();
    run(Command::new("systemd-analyze").arg("verify").arg(&path))
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    let test = "unit_passes_systemd_analyze_verify";
    if tool_ready(
        test,
        runs("systemd-analyze", &["--version"]),
        "systemd-analyze",
    )
    .is_none()
    {
        return;
    }
    let out = verify_unit(&unit_with_built_binary());
    let said = text(&out);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    // verify exits 0 with warnings (an unknown directive, a bad value): accept none
    // about the unit.
    let about_unit: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("kernelkite-agent"))
        .collect();
    assert!(about_unit.is_empty(), "systemd-analyze verify:\n{said}");

    // The same check on a misspelt directive does complain.
    let broken = unit_with_built_binary().replace("ProtectSystem=strict", "ProtectSystm=strict");
    let said = text(&verify_unit(&broken));
    assert!(
        said.contains("ProtectSystm"),
        "a misspelt directive went unnoticed:\n{said}"
    );
}

/// The value of `Key=` in the unit (its one line).
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    let values: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect();
    assert_eq!(values.len(), 1, "{key}= once in the unit: {values:?}");
    values[0]
}

#[test]
fn unit_keeps_its_hardening() {
    let unit = read(&deploy("systemd/kernelkite-agent.service"));
    for line in UNIT_HARDENING {
        assert!(
            unit.lines().any(|l| l == *line),
            "the unit lost `{line}` (docs/AGENT.md, \"Deploy with systemd\")"
        );
    }
    let expected: Vec<String> = CAPABILITIES.iter().map(|c| format!("CAP_{c}")).collect();
    for key in ["CapabilityBoundingSet", "AmbientCapabilities"] {
        let mut caps: Vec<&str> = unit_value(&unit, key).split_whitespace().collect();
        caps.sort_unstable();
        let mut want: Vec<&str> = expected.iter().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(caps, want, "{key}");
    }
    // Directives that would take away what the agent needs.
    for absent in [
        "PrivateNetwork=yes",
        "ProtectKernelLogs=yes",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "User=root",
    ] {
        assert!(
            !unit.lines().any(|l| l == absent),
            "the unit has `{absent}`"
        );
    }
    assert!(unit_value(&unit, "ExecStart")
        .starts_with("/usr/bin/kernelkite agent --config /etc/kernelkite/agent.toml"));
}

/// Every document of each YAML file and every TOML file, as JSON, parsed by Python
/// (PyYAML comes with kubernetes-validate; tomllib is in Python 3.11).
fn python_parse(yaml: &[&Path], toml: &[&Path]) -> Option<Value> {
    const SCRIPT: &str = r#"
import json, sys, tomllib, yaml
n = int(sys.argv[1])
out = {"yaml": [list(yaml.safe_load_all(open(p))) for p in sys.argv[2:2 + n]],
       "toml": [tomllib.load(open(p, "rb")) for p in sys.argv[2 + n:]]}
json.dump(out, sys.stdout)
"#;
    if !runs("python3", &["-c", "import yaml, tomllib"]) {
        return None;
    }
    let out = run(Command::new("python3")
        .args(["-c", SCRIPT, &yaml.len().to_string()])
        .args(yaml)
        .args(toml));
    assert!(out.status.success(), "parsing failed:\n{}", text(&out));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn kubernetes_validate_ok() -> bool {
    runs("python3", &["-m", "kubernetes_validate", "--version"])
}

fn kubernetes_validate(file: &Path, version: Option<&str>) -> Output {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "kubernetes_validate", "--strict"]);
    if let Some(v) = version {
        cmd.args(["--kubernetes-version", v]);
    }
    run(cmd.arg(file))
}

#[test]
fn daemonset_passes_kubernetes_validate() {
    let test = "daemonset_passes_kubernetes_validate";
    if tool_ready(
        test,
        kubernetes_validate_ok(),
        "python3 -m kubernetes_validate",
    )
    .is_none()
    {
        return;
    }
    let file = deploy("kubernetes/daemonset.yaml");
    // The oldest release the manifest is for, and the newest the package knows.
    for version in [Some("1.30.0"), None] {
        let out = kubernetes_validate(&file, version);
        let said = text(&out);
        assert!(
            out.status.success(),
            "kubernetes-validate {version:?}:\n{said}"
        );
        assert_eq!(said.matches(" passed for resource ").count(), 4, "{said}");
    }
    // A misspelt field fails --strict.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("daemonset.yaml");
    let yaml = read(&file).replace("readOnlyRootFilesystem:", "readOnlyRootFilesytem:");
    std::fs::write(&broken, yaml).unwrap();
    let out = kubernetes_validate(&broken, None);
    assert!(
        !out.status.success(),
        "a misspelt field passed:\n{}",
        text(&out)
    );
}

fn kind<'a>(docs: &'a Value, kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

/// The port of an address `HOST:PORT`.
fn port(address: &str) -> u64 {
    address.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn daemonset_and_configs_say_what_matters() {
    let test = "daemonset_and_configs_say_what_matters";
    let yaml = [
        deploy("kubernetes/daemonset.yaml"),
        deploy("otel-collector/config.yaml"),
        deploy("prometheus/kubernetes.yml"),
    ];
    let toml = [deploy("systemd/agent.toml")];
    let yaml_refs: Vec<&Path> = yaml.iter().map(PathBuf::as_path).collect();
    let toml_refs: Vec<&Path> = toml.iter().map(PathBuf::as_path).collect();
    let Some(parsed) = python_parse(&yaml_refs, &toml_refs) else {
        tool_ready(test, false, "python3 with yaml and tomllib");
        return;
    };
    let k8s = &parsed["yaml"][0];

    let ds = kind(k8s, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    assert_ne!(pod["hostNetwork"], true, "the pod's own network namespace");
    assert_eq!(pod["tolerations"][0]["operator"], "Exists", "every node");
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert!(sc["privileged"].is_null() || sc["privileged"] == false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut added: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    added.sort_unstable();
    let mut want = CAPABILITIES.to_vec();
    want.sort_unstable();
    assert_eq!(added, want, "the DaemonSet adds the unit's capabilities");

    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "agent");
    assert!(args.contains(&"--allow-remote"), "{args:?}");
    let listen = args[args.iter().position(|a| *a == "--listen").unwrap() + 1];
    let metrics = &c["ports"][0];
    assert_eq!(metrics["name"], "metrics");
    assert_eq!(metrics["containerPort"].as_u64(), Some(port(listen)));
    let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(
        annotations["prometheus.io/port"],
        port(listen).to_string().as_str()
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/metrics");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert!(c["resources"]["limits"]["memory"].is_string());
    for mount in c["volumeMounts"].as_array().unwrap() {
        assert_eq!(mount["readOnly"] == true, mount["name"] != "tmp", "{mount}");
    }

    // The ConfigMap's agent.toml: parsed by Python's tomllib, the same keys as the
    // flags, the same port as the container's.
    let config = kind(k8s, "ConfigMap")["data"]["agent.toml"]
        .as_str()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let in_map = dir.path().join("agent.toml");
    std::fs::write(&in_map, config).unwrap();
    let from_map = python_parse(&[], &[&in_map]).unwrap();
    let from_map = &from_map["toml"][0];
    assert_eq!(port(from_map["listen"].as_str().unwrap()), port(listen));
    assert_eq!(from_map["allow_remote"], true);

    // The example for the unit: loopback only.
    let example = &parsed["toml"][0];
    assert_eq!(example["listen"], "127.0.0.1:9464");
    assert_eq!(example["allow_remote"], false);
    // Both read as the agent reads --config (unknown keys and bad values refused).
    for file in [deploy("systemd/agent.toml"), in_map.clone()] {
        let read = kernelkite::commands::agent::read_config(&file);
        assert!(read.is_ok(), "{}: {:#}", file.display(), read.unwrap_err());
    }

    // The collector: OTLP over HTTP on 4318, into a metrics pipeline whose parts exist.
    let otel = &parsed["yaml"][1][0];
    let http = otel["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
        .as_str()
        .unwrap();
    assert_eq!(port(http), 4318);
    let pipeline = &otel["service"]["pipelines"]["metrics"];
    assert!(pipeline["receivers"]
        .as_array()
        .unwrap()
        .contains(&"otlp".into()));
    for part in ["receivers", "processors", "exporters"] {
        for name in pipeline[part].as_array().unwrap() {
            let name = name.as_str().unwrap();
            assert!(
                otel[part].get(name).is_some(),
                "{part}.{name} is not defined"
            );
        }
    }

    // The in-cluster scrape keeps the pods the DaemonSet's annotations mark.
    let scrape = &parsed["yaml"][2][0]["scrape_configs"][0];
    let namespace = kind(k8s, "Namespace")["metadata"]["name"].clone();
    assert_eq!(
        scrape["kubernetes_sd_configs"][0]["namespaces"]["names"][0],
        namespace
    );
}

#[test]
fn prometheus_configs_pass_promtool() {
    let test = "prometheus_configs_pass_promtool";
    if tool_ready(test, runs("promtool", &["--version"]), "promtool").is_none() {
        return;
    }
    let check = |file: &Path| run(Command::new("promtool").args(["check", "config"]).arg(file));
    let out = check(&deploy("prometheus/prometheus.yml"));
    assert!(out.status.success(), "promtool:\n{}", text(&out));
    let broken = tempfile::tempdir().unwrap();
    let broken = broken.path().join("prometheus.yml");
    let yaml =
        read(&deploy("prometheus/prometheus.yml")).replace("static_configs", "statik_configs");
    std::fs::write(&broken, &yaml).unwrap();
    assert!(!check(&broken).status.success(), "a misspelt field passed");

    // Debian's promtool is built without Kubernetes discovery: that one refusal is
    // the only one accepted.
    let out = check(&deploy("prometheus/kubernetes.yml"));
    let said = text(&out);
    if !out.status.success() {
        assert!(
            said.contains("field kubernetes_sd_configs not found"),
            "promtool:\n{said}"
        );
        eprintln!("{test}: deploy/prometheus/kubernetes.yml not checked: this promtool has no Kubernetes discovery");
    }
}

#[test]
fn agent_doc_names_only_files_that_exist() {
    let doc = read(&repo().join("docs/AGENT.md"));
    let mut named = 0;
    for word in doc.split(|c: char| c.is_whitespace() || "`()[]<>,\"'".contains(c)) {
        let word = word.trim_end_matches(['.', ':', ';']);
        if word.starts_with("deploy/") {
            assert!(
                repo().join(word).exists(),
                "docs/AGENT.md names {word}, which is missing"
            );
            named += 1;
        }
    }
    assert!(named >= 6, "docs/AGENT.md names the deploy files ({named})");
}
