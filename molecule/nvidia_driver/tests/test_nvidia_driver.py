"""testinfra checks for molecule/nvidia_driver (run by molecule/_shared/verify.yml)."""
import json

testinfra_hosts = ["ansible://gpu_nodes"]

# the hosts the checks below name (test_the_checks_name_the_scenarios_hosts)
CHECKED_HOSTS = ["nvidia-driver-distro", "nvidia-driver-runfile"]

VERSION = "535.309.01"
DEB_VERSION = "535.309.01-0+deb12u1"
PINNED = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-support", "nvidia-smi", "libnvidia-ml1",
          "libcuda1", "firmware-nvidia-gsp"]


def _name(host):
    return host.backend.get_hostname()


def _report(host):
    f = host.file("/var/lib/gpuops/nvidia-driver.json")
    assert f.is_file and f.mode == 0o644
    return json.loads(f.content_string)


def _distro(host):
    return _name(host) == "nvidia-driver-distro"


def test_container_recognised_explicitly(host):
    r = _report(host)
    assert r["container"]["detected"] is True
    assert "/.dockerenv exists" in r["container"]["evidence"]
    assert r["kernel_module"]["mode"] == "auto"
    assert r["kernel_module"]["effective"] == "skip"
    assert r["kernel_module"]["reason"].startswith("container detected")
    assert r["reboot"]["required"] is False and r["reboot"]["will_reboot"] is False
    assert r["rebooted"] is False
    assert r["version"] == VERSION


def test_nouveau_blacklisted_and_initramfs_rebuilt(host):
    conf = host.file("/etc/modprobe.d/gpuops-blacklist-nouveau.conf")
    assert conf.is_file and conf.mode == 0o644
    lines = conf.content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines
    assert host.package("initramfs-tools").is_installed
    # written by converge.yml from the handler's registered result (first converge only)
    handler = json.loads(host.file("/var/lib/gpuops/molecule-initramfs-handler.json").content_string)
    assert handler == {"cmd": ["update-initramfs", "-u", "-k", "all"], "rc": 0}


def test_no_kernel_headers_in_a_container(host):
    kernel = host.check_output("uname -r")
    assert not host.package("linux-headers-%s" % kernel).is_installed
    if not _distro(host):
        # the runfile method with --no-kernel-module needs no dkms in a container
        assert not host.package("dkms").is_installed


def test_persistenced_enabled_not_started(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled
    # no kernel module in a container: the role enables the daemon but does not start it
    assert not svc.is_running


OLD_LIST_LINES = ["deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian%s %s "
                  "contrib non-free non-free-firmware" % (("-security" if s.endswith("security") else ""), s)
                  for s in ("bookworm", "bookworm-updates", "bookworm-security")]


def test_debian_sources_enabled_with_signed_by(host):
    if not _distro(host):
        return
    main = host.file("/etc/apt/sources.list.d/gpuops-nvidia-debian.sources")
    security = host.file("/etc/apt/sources.list.d/gpuops-nvidia-debian-security.sources")
    assert main.mode == 0o644 and security.mode == 0o644
    for f, uri, suites in ((main, "http://deb.debian.org/debian", "bookworm bookworm-updates"),
                           (security, "http://deb.debian.org/debian-security", "bookworm-security")):
        assert f.content_string == ("# Managed by gpuops.k8s_gpu (nvidia_driver)\nTypes: deb\nURIs: %s\nSuites: %s\n"
                                    "Components: contrib non-free non-free-firmware\n"
                                    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" % (uri, suites))
    # prepare.yml left only main in the image's own sources
    assert "non-free" not in host.file("/etc/apt/sources.list.d/debian.sources").content_string
    assert not host.file("/etc/apt/trusted.gpg").exists


def test_previous_releases_list_replaced_and_backed_up(host):
    """prepare.yml left the one-line .list the role's previous release wrote with ansible.builtin.apt_repository:
    the role removed it (backup in /etc/apt/gpuops-backups/, outside apt's directories) and apt reads every
    repository once (no "configured multiple times")."""
    if not _distro(host):
        return
    assert not host.file("/etc/apt/sources.list.d/gpuops-nvidia-debian.list").exists
    backups = host.check_output("ls /etc/apt/gpuops-backups/").split()
    [backup] = [b for b in backups if b.startswith("gpuops-nvidia-debian.list.")]
    assert host.file("/etc/apt/gpuops-backups/" + backup).content_string.splitlines() == OLD_LIST_LINES
    assert sorted(n for n in host.check_output("ls /etc/apt/sources.list.d/").split() if n.startswith("gpuops-")) == [
        "gpuops-nvidia-debian-security.sources", "gpuops-nvidia-debian.sources"]
    r = host.run("apt-get -o Debug::NoLocking=1 -s install nvidia-smi")
    assert r.rc == 0, r.stderr
    assert "configured multiple times" not in r.stdout + r.stderr


def test_driver_packages_pinned_and_held(host):
    if not _distro(host):
        return
    selections = host.check_output("dpkg --get-selections %s" % " ".join(PINNED))
    held = {line.split()[0].split(":")[0]: line.split()[1] for line in selections.splitlines()}
    assert held == {p: "hold" for p in PINNED}
    for p in PINNED:
        assert host.package(p).version == DEB_VERSION
    assert host.package("nvidia-persistenced").is_installed
    assert host.package("firmware-misc-nonfree").is_installed
    assert _report(host)["packages"]["nvidia-driver"] == DEB_VERSION


def test_dkms_registered_but_not_built_for_host_kernel(host):
    if not _distro(host):
        return
    out = host.check_output("dkms status")
    assert "nvidia-current/%s: added" % VERSION in out


def test_nvidia_smi_reports_driver_not_loaded(host):
    if not _distro(host):
        return
    assert host.file("/usr/bin/nvidia-smi").is_file
    r = host.run("nvidia-smi")
    assert r.rc == 9
    assert "couldn't communicate with the NVIDIA driver" in r.stdout + r.stderr
    assert _report(host)["nvml_status"] == "driver_not_loaded"


def test_runfile_from_the_mirror_with_the_seed_flags(host):
    if _distro(host):
        return
    got = host.file("/var/cache/gpuops/NVIDIA-Linux-x86_64-%s.run" % VERSION)
    mirror = host.file("/srv/gpuops-mirror/files/%s/NVIDIA-Linux-x86_64-%s.run" % (VERSION, VERSION))
    assert got.is_file and got.sha256sum == mirror.sha256sum
    runs = host.file("/var/log/dummy-nvidia-installer.log").content_string.splitlines()
    # ran once: not again on the idempotence run nor in check mode
    assert runs == ["%s -no-x-check -no-nouveau-check -no-opengl-files --dkms -s --no-kernel-module" % got.path]
    r = _report(host)
    assert r["method"] == "runfile" and r["held"] is False
    assert host.file("/etc/systemd/system/nvidia-persistenced.service").contains("ExecStart=/usr/bin/nvidia-persistenced")


def test_the_checks_name_the_scenarios_hosts(host):
    """The hosts the checks of this file name are the scenario's platforms (molecule/_shared/hosts_guard.py)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "_shared"))
    from hosts_guard import assert_checks_name_the_scenarios_hosts
    assert_checks_name_the_scenarios_hosts(host, __file__, CHECKED_HOSTS)
