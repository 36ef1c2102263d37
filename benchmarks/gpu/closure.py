"""Check that the wheels carried to a lent GPU machine (wheels.txt), with the packages already
there (device_packages.txt), satisfy dagster's and dagster_graphbook's requirement closure.

The device has no network: a missing wheel is found only there, minutes into a scarce lease; a
carried duplicate of a device package shadows its torch-compatible copy. So this runs here first.

    python benchmarks/gpu/closure.py                  # offline: metadata of this environment
    python benchmarks/gpu/closure.py --wheels .whl    # the downloaded wheels' own metadata
    python benchmarks/gpu/closure.py --imports dagster_graphbook definitions --run-job
    python3 benchmarks/gpu/closure.py --installed     # on the device, after installing .whl

Requirements are evaluated for CPython 3.12 on Linux x86_64 (the device's python3). A carried
package must match the specifier by version; a device package by name, and by version where
device_packages.txt (or, with --installed, the running interpreter) gives one. Exit 1 on any
unsatisfied requirement, carried device package, stray or incompatible wheel, or unexplained
import.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import re
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging import tags
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # a bare interpreter (wheels.sh's python3): pip's vendored copy
    from pip._vendor.packaging import tags  # type: ignore[no-redef]
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import (  # type: ignore[no-redef]
        canonicalize_name,
        parse_wheel_filename,
    )
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROJECT = "dagster-graphbook"
# Needed on the device only for dagster's UI, which no device run starts.
NOT_ON_DEVICE = {"dagster-webserver"}
# Imported by dagster_graphbook at run time without being declared in pyproject.toml (Dagster
# brings them here); the device needs them all the same.
IMPORTED_ROOTS = ["pydantic", "universal-pathlib", "fsspec", "jinja2", "requests", "sqlalchemy"]

# The device's python3: CPython 3.12.3 on Linux x86_64 (glibc 2.39, Ubuntu 24.04).
ENV = dict(default_environment())
ENV.update(
    implementation_name="cpython",
    implementation_version="3.12.3",
    os_name="posix",
    platform_machine="x86_64",
    platform_python_implementation="CPython",
    platform_system="Linux",
    python_full_version="3.12.3",
    python_version="3.12",
    sys_platform="linux",
)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
DEVICE_TAGS = set(tags.cpython_tags((3, 12), ["cp312", "abi3", "none"], PLATFORMS))
DEVICE_TAGS |= set(tags.compatible_tags((3, 12), "cp312", PLATFORMS))


def read_pins(path: Path) -> dict[str, str]:
    """NAME or NAME==VERSION per line (comments allowed) -> {canonical name: version or ''}."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name.strip())] = version.strip()
    return pins


def project_roots() -> list[tuple[Requirement, str]]:
    """pyproject.toml's [project.dependencies] (less the UI) plus what the package imports."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"(?ms)^dependencies = \[(.*?)^\]", text)
    assert block, "pyproject.toml: no [project] dependencies list"
    deps = [Requirement(d) for d in re.findall(r'"([^"]+)"', block.group(1))]
    deps = [d for d in deps if canonicalize_name(d.name) not in NOT_ON_DEVICE]
    declared = [(d, f"{PROJECT} (pyproject.toml)") for d in deps]
    return declared + [(Requirement(n), f"{PROJECT} (imports it)") for n in IMPORTED_ROOTS]


def wheel_requires(wheels: Path) -> tuple[dict[str, tuple[str, list[str]]], list[str], float]:
    """Each wheel's name, version and Requires-Dist, read from its METADATA; plus the wheels'
    problems (duplicates, tags the device's python3 cannot install) and their size in MB."""
    found: dict[str, tuple[str, list[str]]] = {}
    problems: list[str] = []
    size = 0
    for whl in sorted(wheels.glob("*.whl")):
        size += whl.stat().st_size
        name, version, _, wtags = parse_wheel_filename(whl.name)
        if not wtags & DEVICE_TAGS:
            problems.append(f"{whl.name}: no tag CPython 3.12 on manylinux x86_64 installs")
        if name in found:
            problems.append(f"{name}: two wheels (pip --target refuses both): {whl.name}")
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            headers = HeaderParser().parsestr(z.read(meta).decode("utf-8"))
        found[name] = (str(version), headers.get_all("Requires-Dist") or [])
    return found, problems, size / 1e6


def local_requires(pins: dict[str, str]) -> tuple[dict[str, tuple[str, list[str]]], list[str]]:
    """The pinned packages' Requires-Dist as installed here (CI's versions, so no network)."""
    found: dict[str, tuple[str, list[str]]] = {}
    notes: list[str] = []
    for name, pinned in pins.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            notes.append(f"{name}: not installed here; its own requirements went unchecked")
            found[name] = (pinned, [])
            continue
        if dist.version != pinned:
            notes.append(f"{name}: wheels.txt pins {pinned}, this environment has {dist.version}")
        found[name] = (pinned, dist.requires or [])
    return found, notes


def check(
    carried: dict[str, tuple[str, list[str]]],
    device: dict[str, str],
    roots: list[tuple[Requirement, str]],
) -> tuple[list[str], set[str], set[str]]:
    """Walk the closure from roots: (unsatisfied requirements, carried used, device used)."""
    unsatisfied: list[str] = []
    used: set[str] = set()
    device_used: set[str] = set()
    queue: list[tuple[Requirement, str, set[str]]] = [(r, who, {""}) for r, who in roots]
    while queue:
        req, asker, extras = queue.pop(0)
        if req.marker and not any(req.marker.evaluate({**ENV, "extra": e}) for e in extras):
            continue
        name = canonicalize_name(req.name)
        if name in device:
            device_used.add(name)
            version = device[name]
            if version and not req.specifier.contains(Version(version), prereleases=True):
                unsatisfied.append(f"{req} (required by {asker}): the device has {version}")
            continue
        if name not in carried:
            unsatisfied.append(f"{req} (required by {asker}): neither carried nor on the device")
            continue
        version, requires = carried[name]
        if not req.specifier.contains(Version(version), prereleases=True):
            unsatisfied.append(f"{req} (required by {asker}): carried {name}=={version}")
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in used:
            continue
        used.add(key)
        asker = f"{name} {version}"
        queue += [(Requirement(r), asker, {"", *req.extras}) for r in requires]
    return unsatisfied, {u.split("[")[0] for u in used}, device_used


def check_imports(modules: list[str], run_job: bool, known: set[str]) -> list[str]:
    """Import modules here (and run a one-op job); flag each third-party top-level module whose
    distribution is neither carried nor on the device: an import the metadata does not declare."""
    sys.path.insert(0, str(REPO))
    for module in modules:
        importlib.import_module(module)
    if run_job:
        import dagster as dg

        @dg.op
        def one() -> int:
            return 1

        @dg.job
        def smoke() -> None:
            one()

        assert smoke.execute_in_process().success
    owners = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    problems = []
    for top in sorted({m.split(".")[0] for m in list(sys.modules)} - stdlib):
        dists = {canonicalize_name(d) for d in owners.get(top, [])}
        if dists and not dists & (known | {PROJECT}):
            problems.append(f"import {top} (from {', '.join(sorted(dists))})")
    return problems


def installed_versions(device: dict[str, str]) -> dict[str, str]:
    """The running interpreter's versions of the device packages (run on the device itself)."""
    out = {}
    for name, listed in device.items():
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = listed
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", type=Path, default=HERE / "wheels.txt", help="pinned wheels")
    ap.add_argument("--device", type=Path, default=HERE / "device_packages.txt")
    ap.add_argument("--wheels", type=Path, help="read metadata from these .whl files instead")
    ap.add_argument("--imports", nargs="*", default=[], help="modules to import and map")
    ap.add_argument("--run-job", action="store_true", help="also run a one-op job in-process")
    ap.add_argument("--installed", action="store_true", help="device versions from this python")
    args = ap.parse_args(argv)

    pins = read_pins(args.list)
    device = read_pins(args.device)
    if args.installed:
        device = installed_versions(device)
    failures: list[str] = []
    notes: list[str] = []
    if args.wheels:
        carried, problems, mb = wheel_requires(args.wheels)
        failures += problems
        failures += [
            f"{n}: in wheels.txt, no wheel in {args.wheels}" for n in pins.keys() - carried.keys()
        ]
        failures += [f"{n}: a wheel not in wheels.txt" for n in carried.keys() - pins.keys()]
        failures += [
            f"{n}: wheel {carried[n][0]}, wheels.txt pins {v}"
            for n, v in pins.items()
            if n in carried and carried[n][0] != v
        ]
        print(f"carried: {len(carried)} wheels, {mb:.1f} MB in {args.wheels}")
    else:
        carried, notes = local_requires(pins)
        print(f"carried: {len(carried)} wheels (offline: this environment's metadata)")
    shadowing = sorted(carried.keys() & device.keys())
    failures += [
        f"{n}: carried, and on the device (it would shadow the device's)" for n in shadowing
    ]

    unsatisfied, used, device_used = check(carried, device, project_roots())
    # on the device, a version its image holds that a requirement declares too new or too old
    # (protobuf 7.36.2 under dagster's <7, seen on an H200) cannot be changed without shadowing
    # the image's own stack: it is said, and it fails the check only if the imports or the job
    # then fail with it
    on_device = [u for u in unsatisfied if ": the device has " in u] if args.installed else []
    failures += [u for u in unsatisfied if u not in on_device]
    print(f"closure: {', '.join(sorted(used))}")
    print(f"from the device: {', '.join(sorted(device_used))}")
    notes += [f"{n}: carried but no requirement needs it" for n in sorted(carried.keys() - used)]
    if args.imports or args.run_job:
        failures += check_imports(args.imports, args.run_job, set(carried) | set(device))
        print(f"imports checked: {', '.join(args.imports)}{' and a job run' * args.run_job}")
        notes += [f"{u}; the imports and the job ran with it" for u in on_device]
    else:
        failures += on_device
    for note in notes:
        print(f"note: {note}")
    for failure in failures:
        print(f"FAIL: {failure}")
    print("closure: FAILED" if failures else "closure: OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
