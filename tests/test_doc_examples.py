"""Every example the user guide prints runs as printed (issue 39).

**Which blocks are examples.** Every fenced block of README.md, config/README.md,
benchmarks/README.md and docs/*.md is either a ```` ```text ```` block (output, a listing, a
diagram: no example) or an example with a marker, an HTML comment on the line just before its
fence (GitHub does not show it)::

    <!-- example: dry-run -->                 checked by its dry run (below)
    <!-- example: dry-run slurm -->           the same, planned for Slurm (or sge, ssh)
    <!-- example: dry-run file=NAME -->       ... and the file the pages' commands call NAME
    <!-- example: run -->                     run for real
    <!-- example: skip: REASON -->            not run; REASON says why, and what runs it instead

A block with neither (no language, or a language and no marker) fails
:func:`test_every_block_is_text_or_a_marked_example`: a new example cannot slip in untested.

**What runs.** Each example runs in a folder of its own that holds the checkout (a scratch copy,
linked in, with the .venv), as a user runs it from a checkout:

- A YAML block whose top-level keys are config keys is a config. One that gives runs (``runs``
  or ``experiments``) is written to ``my-benchmark.yaml`` and run with README.md's own command
  for it, in a folder of its own: ``snakemake --profile profiles/local --configfile
  my-benchmark.yaml --directory runs/mine`` (the README's line of that profile; the defaults
  fill every key it leaves out). One that gives no runs (a ``datasets`` or ``environments``
  part) is merged over config/config.yaml, as ``--configfile`` merges it in the checkout
  (config/README.md): the same command without ``--directory``. A YAML block of profile keys
  (``default-resources``) goes into a copy of the profile it names, run with the README's
  command and ``my-benchmark.yaml``.
- A shell block is commands: a line each (``\\`` continues one; ``#`` comments dropped).
  ``snakemake`` runs with ``--dry-run``. ``make`` runs as ``make -n`` (make's own dry run: the
  target and its variables exist; what its recipe runs is tested where a page prints it, or
  by the target's own test); ``make plan`` is a dry run itself and runs for real, without the
  set-up (``-o setup``: done, this is its venv). Every other command runs for real (``source``,
  ``clusterbench-history``, ``--help``): each is cheap and writes nothing but its scratch folder.
- A Python block is a Snakefile that uses clusterbench as a module: a dry run in a folder of its
  own, its ``bench`` config being ``my-benchmark.yaml``.

A dry run passes when Snakemake exits 0 and, for a config, plans every run it gives: none is
skipped and each hand-written run's folder is among the jobs' outputs. A real run passes when
it exits 0. A failure names the page, the line and the command.

**No workflow runs for real here.** None of the configs is small as printed: the smallest, the
README's image folder, trains a ResNet-20 for 5 epochs on at least 500 images (each split holds
``min_split_size`` = 50) and measures the interconnect at full size, minutes on 2 cores.
``make demo``'s pipeline runs for real in tests/test_demo.py, and config/examples/ in
tests/test_examples.py.

**What a user's own things become.** A page names your data, checksum or shared store where
the test has none (``/datasets/photos``): :data:`PLACEHOLDERS` replaces each with one the test
makes (a tiny image folder, a miniature ImageNet with the official files, a checksum of the right
form, an empty history store); the files the commands name (``my-benchmark.yaml``: the example
marked ``file=my-benchmark.yaml``; ``hosts``; the history store at ``results/history.sqlite``)
are made in each example's folder (:func:`prepare`).

**GPU and cluster examples** are planned for Slurm: the local profile's dry run of a GPU run on
this machine (no GPU) says the run is skipped, which proves nothing. So the README's Slurm line
runs them, planned for its executor (``CLUSTERBENCH_EXECUTOR=slurm``, which ``make plan``
sets) on a fake site: ``sinfo`` answers partitions of 4 nodes of 64 CPUs and 8 GPUs, SGE's
``qsub -w v`` finds a queue, and every command that would submit (``sbatch``, ``srun``, ``qsub``
without ``-w v``, ...) logs its call and fails: no example may call one. The workflow's own
checks then run as on a real site: the config, the data read in place, each training job sized
against the partition. An ssh example's hosts file lists this machine.

**Cost.** The dry runs are forked after Snakemake's imports, three at a time, in one batch
(tests/snakemake_forks.py, as tests/test_bad_input.py does), and a command several pages print
runs once; the real runs go beside them. About 20 dry runs and 10 commands: 9 s on 2 quiet
cores, 25 s beside other tests (17 s of CPU); marked ``slow`` (``make test``, not ``make check``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import clusterbench
import pytest
import yaml
from conftest import CHECKOUT_PARTS, REPO, copy_checkout, snakemake_env
from test_docs import PAGES, TOP, code_blocks

MARKER = re.compile(r"<!--\s*example:\s*(?P<body>.*?)\s*-->")
KINDS = ("run", "dry-run", "skip")
PROFILES = ("local", "slurm", "sge", "ssh")
#: Profile keys a YAML block may set (the Slurm page's partition and account).
PROFILE_KEYS = {"default-resources", "set-resources", "slurm-status-command", "slurm-qos"}
#: The file a command names, and the example it is (a marker's ``file=``).
CONFIG_FILE = "my-benchmark.yaml"
#: What the pages put where a user's own thing goes, and what the test puts there instead
#: (the ``{...}`` are made by :func:`scratch`); a placeholder no example uses fails a test.
PLACEHOLDERS = {
    "/datasets/photos": "{photos}",
    "/datasets/imagenet": "{imagenet}",
    "3b0c...e1": hashlib.sha256(b"a user's own file").hexdigest(),
    # a module from git at the release's tag (docs/running.md): the checkout's copy, a local
    # repository tagged so (scratch)
    'github("<owner>/clusterbench"': 'gitfile("{checkout}"',
    "/shared/cb/history.sqlite": "{checkout}/results/history.sqlite",
}
#: A placeholder is replaced where a word ends with it: ``/datasets/photos`` is no part of
#: ``/datasets/photos.zip`` (which an example names for a dataset no run reads).
_END = r"(?![\w.])"
#: The fake site's partitions (``sinfo``): 4 nodes of 64 CPUs and 8 GPUs each, the default one
#: and the one the pages name for the jobs of a run that grows (docs/elastic.md).
SINFO = ("gpu*|4|64|gpu:a100:8", "scavenger|4|64|gpu:a100:8")
SUBMITTERS = ("sbatch", "srun", "salloc", "scancel", "qsub", "qrsh", "qdel")
#: Programs no example runs for real here: a workflow (minutes: the module's doc), a make target
#: (its set-up and pipelines), a log followed for ever.
NEVER_REAL = ("snakemake", "make", "tail")


# ------------------------------------------------------------------------------ the examples


@dataclass(frozen=True)
class Example:
    """One example: a config, a profile part, a Snakefile, or a command of a shell block."""

    page: str
    line: int  # of the block's fence (a command: its own line)
    kind: str  # run, dry-run, skip
    what: str  # config, fragment, profile, snakefile, command
    text: str
    profile: str = "local"
    reason: str = ""
    file: str | None = None

    @property
    def id(self) -> str:
        shown = self.text if self.what == "command" else self.what
        return f"{self.page}:{self.line} {shown}"[:120]


@dataclass
class Marker:
    kind: str
    profile: str = "local"
    reason: str = ""
    file: str | None = None
    problems: list[str] = field(default_factory=list)


def parse_marker(body: str) -> Marker:
    """``dry-run slurm file=NAME``, ``run``, ``skip: REASON`` (the module's doc)."""
    kind, _, rest = body.partition(":") if body.startswith("skip") else body.partition(" ")
    kind = kind.strip()
    if kind not in KINDS:
        return Marker(kind, problems=[f"marker kind {kind!r}: expected one of {', '.join(KINDS)}"])
    if kind == "skip":
        reason = rest.strip()
        return Marker(kind, reason=reason, problems=[] if reason else ["skip: say why"])
    marker = Marker(kind)
    for word in rest.split():
        if word in PROFILES:
            marker.profile = word
        elif word.startswith("file="):
            marker.file = word[len("file=") :]
        else:
            marker.problems.append(f"marker word {word!r}: a profile ({PROFILES}) or file=NAME")
    return marker


def commands(body: str, info: str) -> Iterator[tuple[int, str]]:
    """``(line offset in the block, command)``: a line each, ``\\`` continuing it, comments
    dropped; in a ``console`` block only the lines after a ``$`` prompt."""
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        if info == "console":
            if not text.startswith("$ "):
                continue
            text = text[2:]
        text = re.sub(r"\s+#\s.*$|^\s*#.*$", "", text).strip()  # a comment
        if text:
            yield start, re.sub(r"\s+", " ", text)


def program(command: str) -> str:
    """The program a command line starts (after its ``VAR=value`` words)."""
    words = shlex.split(command)
    return next((w for w in words if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)), "")


def config_kind(body: str) -> str | None:
    """``config`` (a config that gives runs), ``fragment`` (config keys, no runs), ``profile``
    (profile keys), or None: no YAML mapping the test knows."""
    try:
        value = yaml.safe_load(body)
    except yaml.YAMLError:
        return None
    if not isinstance(value, Mapping) or not value:
        return None
    keys = set(map(str, value))
    if keys <= PROFILE_KEYS:
        return "profile"
    if keys <= TOP:
        return "config" if keys & {"runs", "experiments"} else "fragment"
    return None


def block_examples(
    page: str, number: int, info: str, body: str, marker: Marker
) -> tuple[list[Example], list[str]]:
    """The examples of one marked block (the fence on line ``number``), and its problems."""
    where = f"{page}:{number}"
    common = dict(page=page, kind=marker.kind, profile=marker.profile, reason=marker.reason)
    if marker.kind == "run" and info not in ("bash", "sh", "shell", "console"):
        return [], [f"{where}: a ```{info} example runs as a dry run here: mark it dry-run"]
    if info in ("yaml", "yml"):
        what = config_kind(body)
        if what is None:
            return [], [f"{where}: a YAML example that is no config and no profile part"]
        return [Example(line=number, what=what, text=body, file=marker.file, **common)], []
    if info == "python":
        return [Example(line=number, what="snakefile", text=body, **common)], []
    if info in ("bash", "sh", "shell", "console"):
        found = [
            Example(line=number + 1 + offset, what="command", text=command, **common)
            for offset, command in commands(body, info)
        ]
        never = [e for e in found if e.kind == "run" and program(e.text) in NEVER_REAL]
        return [e for e in found if e not in never], [
            *([] if found else [f"{where}: a shell example without a command"]),
            *(f"{e.page}:{e.line}: `{program(e.text)}` never runs for real here" for e in never),
        ]
    return [], [f"{where}: a marked block of language {info!r}: the test cannot run it"]


def page_examples(text: str, page: str) -> tuple[list[Example], list[str]]:
    """Every example of a page, and what breaks the rule (the module's doc)."""
    lines = text.splitlines()
    found: list[Example] = []
    problems: list[str] = []
    for number, info, body in code_blocks(text):
        before = lines[number - 2].strip() if number > 1 else ""
        match = MARKER.fullmatch(before)
        where = f"{page}:{number}"
        if info == "text":
            if match:
                problems.append(f"{where}: a ```text block is no example: drop its marker")
            continue
        if not match:
            problems.append(
                f"{where}: a ```{info} block without a marker: mark it as an example "
                "(<!-- example: dry-run | run | skip: why -->) or make it ```text"
            )
            continue
        marker = parse_marker(match.group("body"))
        problems += [f"{where}: {p}" for p in marker.problems]
        if not marker.problems:
            examples, more = block_examples(page, number, info, body, marker)
            found += examples
            problems += more
    return found, problems


def all_examples() -> tuple[list[Example], list[str]]:
    found: list[Example] = []
    problems: list[str] = []
    for page in PAGES:
        examples, more = page_examples(page.read_text(), str(page.relative_to(REPO)))
        found += examples
        problems += more
    return found, problems


EXAMPLES, PROBLEMS = all_examples()
RUNNABLE = [e for e in EXAMPLES if e.kind != "skip"]
SKIPPED = [e for e in EXAMPLES if e.kind == "skip"]


# -------------------------------------------------------------------- how each one is run


def config_command(profile: str, examples: list[Example] = EXAMPLES) -> str:
    """README.md's command for a config of your own, on ``profile``."""
    for e in examples:
        if e.page == "README.md" and e.what == "command":
            words = split_env(e.text, Path("."))[1]
            if (
                words[:3] == ["snakemake", "--profile", f"profiles/{profile}"]
                and f"--configfile {CONFIG_FILE}" in e.text
                and "--directory" in words
            ):
                return e.text
    raise AssertionError(
        f"README.md prints no `snakemake --profile profiles/{profile} --configfile "
        f"{CONFIG_FILE} --directory ...`: the command the config examples run with"
    )


def without_directory(command: str) -> str:
    words = shlex.split(command)
    at = words.index("--directory")
    return shlex.join(words[:at] + words[at + 2 :])


def substituted(text: str, made: Mapping[str, str]) -> str:
    for placeholder, real in PLACEHOLDERS.items():
        parts = re.split(re.escape(placeholder) + _END, text)
        text = real.format(**made).join(parts)
    return text


@dataclass
class Check:
    """How an example is run: a Snakemake dry run through the fork server (``argv``), or a
    shell command for real (``shell``), in ``cwd`` with ``env``."""

    example: Example
    command: str
    cwd: Path
    env: dict[str, str]
    argv: list[str] | None = None
    shell: str | None = None
    runs: list[str] = field(default_factory=list)  # the config's hand-written runs


def split_env(command: str, cwd: Path) -> tuple[dict[str, str], list[str]]:
    """A command's leading ``VAR=value`` words (``$PWD`` and ``~`` expanded as a shell in
    ``cwd`` would) and the rest."""
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        value = value.replace("$PWD", str(cwd)).replace("${PWD}", str(cwd))
        env[name] = os.path.expanduser(value)
    return env, words


def profile_executor(profile: Path) -> str:
    """The executor a profile names (what ``make plan`` plans a dry run for)."""
    return yaml.safe_load((profile / "config.yaml").read_text()).get("executor", "local")


def planned_env(argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``CLUSTERBENCH_EXECUTOR`` set from the profile of ``argv``, as ``make plan``
    sets it: a dry run has no executor of its own (config/README.md, ``on_unavailable``)."""
    if "--profile" not in argv:
        return env
    profile = Path(argv[argv.index("--profile") + 1])
    profile = profile if profile.is_absolute() else cwd / profile
    return {**env, "CLUSTERBENCH_EXECUTOR": profile_executor(profile)}


def config_check(example: Example, cwd: Path, made: Mapping[str, str], env: dict) -> Check:
    """A config, fragment or profile part, run with README.md's command (module doc)."""
    command = config_command(example.profile)
    text = substituted(example.text, made)
    if example.what == "profile":
        profile = cwd / "mysite"  # the page's copy of the profile
        shutil.copytree(cwd / "profiles" / example.profile, profile)
        settings = yaml.safe_load((profile / "config.yaml").read_text())
        for key, value in yaml.safe_load(text).items():
            settings[key] = {**settings.get(key, {}), **value}
        (profile / "config.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        command = command.replace(f"profiles/{example.profile}", str(profile.relative_to(cwd)))
    else:
        (cwd / CONFIG_FILE).write_text(text)
    if example.what == "fragment":
        command = without_directory(command)
    extra, words = split_env(command, cwd)
    argv = [*words[1:], "--dry-run"]
    runs = (yaml.safe_load(text).get("runs") or []) if example.what == "config" else []
    check = Check(example, command, cwd, planned_env(argv, cwd, {**env, **extra}), argv=argv)
    check.runs = [r["name"] for r in runs]
    return check


def snakefile_check(example: Example, cwd: Path, made: Mapping[str, str], env: dict) -> Check:
    """A Snakefile using clusterbench as a module, its ``bench`` config the README's own."""
    (cwd / "Snakefile").unlink()
    (cwd / "Snakefile").write_text(substituted(example.text, made))
    (cwd / "config").unlink()
    (cwd / "config").mkdir()
    bench = yaml.safe_load((cwd / CONFIG_FILE).read_text())
    (cwd / "config" / "config.yaml").write_text(yaml.safe_dump({"bench": bench}))
    command = f"snakemake --profile {made['checkout']}/profiles/local"
    argv = [*shlex.split(command)[1:], "--dry-run"]
    return Check(example, command, cwd, planned_env(argv, cwd, env), argv=argv)


def command_check(example: Example, cwd: Path, made: Mapping[str, str], env: dict) -> Check:
    """A shell command: Snakemake's dry run, make's, or the command for real (module doc)."""
    text = substituted(example.text, made)
    extra, words = split_env(text, cwd)
    env = {**env, **extra}
    name = words[0]
    if name == "snakemake" and example.kind == "dry-run":
        argv = [*words[1:], "--dry-run"]
        return Check(example, example.text, cwd, planned_env(argv, cwd, env), argv=argv)
    if name == "make" and example.kind == "dry-run":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        flag = ["-o", "setup"] if targets == ["plan"] else ["-n"]
        return Check(example, example.text, cwd, env, shell=shlex.join(["make", *flag, *words[1:]]))
    if name in NEVER_REAL:  # in a dry-run block: `tail` (page_examples refuses a run's)
        raise AssertionError(f"{example.id}: no dry run of `{name}`: mark its block skip")
    return Check(example, example.text, cwd, env, shell=text)


# ----------------------------------------------------------------------- the scratch folders


FAKE_TOOL = """#!/bin/sh
echo "{name} $*" >> "$CLUSTERBENCH_FAKE_CALLS"
{body}
"""


def fake_site(folder: Path) -> Path:
    """Slurm's and SGE's commands answering as a site (module doc); the rest log and fail."""
    folder.mkdir()
    bodies = {
        "sinfo": "\n".join(f"echo '{line}'" for line in SINFO),
        "qsub": 'case " $* " in *" -w v "*) echo "verification: found suitable queue(s)"; '
        "exit 0;; esac\nexit 1",
    }
    for name in (*SUBMITTERS, "sinfo", "squeue", "sacct", "scontrol", "sacctmgr", "qconf"):
        tool = folder / name
        tool.write_text(FAKE_TOOL.format(name=name, body=bodies.get(name, "exit 1")))
        tool.chmod(0o755)
    return folder


def image_folder(folder: Path) -> Path:
    """A folder of two class folders of one tiny PNG each: a user's own images."""
    from PIL import Image

    for k, name in enumerate(("cat", "dog")):
        (folder / name).mkdir(parents=True)
        Image.new("RGB", (8, 8), (80 * k, 0, 0)).save(folder / name / "1.png")
    return folder


def tagged(repo: Path, tag: str) -> None:
    """``repo`` made a git repository of one commit, tagged ``tag`` (a release of it)."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"]}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", tag], ["tag", tag]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def scratch(root: Path) -> dict[str, str]:
    """The checkout (a copy) and the user's own things of :data:`PLACEHOLDERS`."""
    import imagenet_mini
    from clusterbench.history import store

    checkout = copy_checkout(root / "checkout")
    for part in ("Makefile", "benchmarks", "tools"):
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, checkout / part)
    (checkout / ".venv").symlink_to(sys.prefix)  # the venv the tests run in
    (checkout / "results").mkdir()
    store.append(checkout / "results" / "history.sqlite", [], {"config_hash": "", "commit_sha": ""})
    imagenet_mini.make(root / "imagenet", train_per_class=2, val=4)
    tagged(checkout, f"v{clusterbench.__version__}")
    return {
        "checkout": str(checkout),
        "photos": str(image_folder(root / "photos")),
        "imagenet": str(root / "imagenet"),
        "bin": str(fake_site(root / "bin")),
    }


def prepare(example: Example, folder: Path, made: Mapping[str, str]) -> Check:
    """``example``'s folder (the checkout's parts linked in, the files its command names
    made) and how it is run there."""
    folder.mkdir(parents=True)
    checkout = Path(made["checkout"])
    for part in (*CHECKOUT_PARTS, "Makefile", "benchmarks", "tools", ".venv"):
        (folder / part).symlink_to(checkout / part)
    if "clusterbench-history" in example.text:
        (folder / "results").symlink_to(checkout / "results")
    (folder / "hosts").write_text("localhost:2\n")
    own = next(e for e in EXAMPLES if e.file == CONFIG_FILE)
    (folder / CONFIG_FILE).write_text(substituted(own.text, made))
    env = snakemake_env(
        {
            "PATH": f"{made['bin']}{os.pathsep}{snakemake_env()['PATH']}",
            "CLUSTERBENCH_FAKE_CALLS": str(folder / "calls"),
            "PWD": str(folder),
        }
    )
    if example.what == "command":
        return command_check(example, folder, made, env)
    if example.what == "snakefile":
        return snakefile_check(example, folder, made, env)
    return config_check(example, folder, made, env)


# ------------------------------------------------------------------------------- the runs


def dry_runs(checks: list[Check], root: Path) -> dict[str, SimpleNamespace]:
    """The Snakemake dry runs, each a process of its own, three at a time (forked after
    Snakemake's imports: tests/snakemake_forks.py)."""
    jobs = [
        {"argv": c.argv, "cwd": str(c.cwd), "env": c.env, "out": str(c.cwd / "dry-run.out")}
        for c in checks
    ]
    (root / "jobs.json").write_text(json.dumps(jobs))
    forks = [sys.executable, str(Path(__file__).parent / "snakemake_forks.py")]
    subprocess.run(
        [*forks, str(root / "jobs.json"), "3"], check=True, timeout=600, env=snakemake_env()
    )
    return {
        c.example.id: SimpleNamespace(
            returncode=int(Path(job["out"] + ".rc").read_text()),
            output=Path(job["out"]).read_text(errors="replace"),
        )
        for c, job in zip(checks, jobs, strict=True)
    }


def real_run(check: Check) -> SimpleNamespace:
    proc = subprocess.run(
        ["bash", "-c", check.shell],
        cwd=check.cwd,
        env=check.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return SimpleNamespace(returncode=proc.returncode, output=proc.stdout + proc.stderr)


def problems(check: Check, outcome: SimpleNamespace) -> list[str]:
    """What is wrong with ``check``'s outcome (module doc: when a dry or real run passes)."""
    out = outcome.output
    found = [] if outcome.returncode == 0 else [f"exit status {outcome.returncode}"]
    if check.example.what in ("config", "profile") and "skipping run" in out:
        found += [line for line in out.splitlines() if line.startswith("skipping run")]
    found += [f"run {run!r} is not planned" for run in check.runs if f"runs/{run}/" not in out]
    calls = check.cwd / "calls"
    submitted = [
        call
        for call in (calls.read_text().splitlines() if calls.exists() else [])
        if call.split()[0] in SUBMITTERS and not call.startswith("qsub -w v")
    ]
    return found + [f"it submitted: {call}" for call in submitted]


def same_run(check: Check) -> tuple:
    """What makes two checks one run: the command, the config it reads, the environment the
    page gives it (a command several pages print runs once)."""
    config = check.cwd / CONFIG_FILE
    own = {k: v.replace(str(check.cwd), ".") for k, v in check.env.items() if k.isupper()}
    own.pop("CLUSTERBENCH_FAKE_CALLS", None)
    own.pop("PWD", None)
    return (
        tuple(check.argv or ()),
        check.shell,
        check.example.what,
        config.read_text() if config.exists() else None,
        tuple(sorted(own.items())),
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[Check, SimpleNamespace]]:
    """Every runnable example, run: the dry runs in one batch, the real runs beside it; a run
    that several examples make once."""
    root = tmp_path_factory.mktemp("doc-examples")
    made = scratch(root)
    checks = [prepare(e, root / f"ex{i:02d}", made) for i, e in enumerate(RUNNABLE)]
    first: dict[tuple, Check] = {}
    for check in checks:
        first.setdefault(same_run(check), check)
    runs = list(first.values())
    with ThreadPoolExecutor(max_workers=1) as pool:
        shells = {c.example.id: pool.submit(real_run, c) for c in runs if c.shell}
        done = dry_runs([c for c in runs if c.argv], root)
        done.update({name: future.result() for name, future in shells.items()})
    ran = {c.example.id: first[same_run(c)] for c in checks}
    return {c.example.id: (ran[c.example.id], done[ran[c.example.id].example.id]) for c in checks}


# ------------------------------------------------------------------------------- the tests


def test_every_block_is_text_or_a_marked_example():
    assert not PROBLEMS, "\n".join(PROBLEMS)


@pytest.mark.slow  # a Snakemake per example: about 25 s in all on 2 cores (make test only)
@pytest.mark.parametrize("example", RUNNABLE, ids=[e.id for e in RUNNABLE])
def test_the_example_runs_as_printed(example: Example, outcomes):
    check, outcome = outcomes[example.id]
    found = problems(check, outcome)
    how = "dry run" if check.argv else "run"
    assert not found, (
        f"{example.page}:{example.line}: the example fails ({how} of `{check.command}` in "
        f"{check.cwd}): {'; '.join(found)}\n{outcome.output[-4000:]}"
    )


@pytest.mark.parametrize("example", SKIPPED, ids=[e.id for e in SKIPPED])
def test_a_skipped_example_says_why(example: Example):
    pytest.skip(f"{example.page}:{example.line}: {example.reason}")


SAMPLE = """\
# A page

```text
results/report/report.pdf     output: no example
```

```
make demo
```

<!-- example: dry-run slurm file=mine.yaml -->
```yaml
runs:
  - {name: a, dataset: digits}
```

<!-- example: dry-run -->
```yaml
environments:
  half: {workers: 2}
```

<!-- example: dry-run -->
```bash
source .venv/bin/activate   # first
PYTHONPATH=$PWD snakemake --profile profiles/local \\
    --directory runs/x
```

<!-- example: skip -->
```bash
tail -f log
```

<!-- example: skip: needs two hosts -->
```console
$ cat hosts
gpu1:2
$ snakemake --profile profiles/ssh
```

<!-- example: run -->
```text
a marked listing
```

<!-- example: dry-rn -->
```yaml
runs: []
```

<!-- example: run -->
```bash
snakemake --profile profiles/local
```
"""


def test_the_rule_on_a_sample_page():
    """Text is no example; a block without a marker, a skip without a reason, a marked text
    block, an unknown kind and a workflow marked to run for real are each named with their
    line; commands are a line each."""
    found, problems_ = page_examples(SAMPLE, "p.md")
    assert [p.split(":", 2)[1] for p in problems_] == ["7", "31", "43", "48", "54"]
    assert "``` block without a marker" in problems_[0]
    assert problems_[1].endswith("skip: say why") and "drop its marker" in problems_[2]
    assert "marker kind 'dry-rn'" in problems_[3]
    assert problems_[4].endswith("`snakemake` never runs for real here")
    config, fragment, *shell = found
    assert (config.what, config.profile, config.file) == ("config", "slurm", "mine.yaml")
    assert config.line == 12
    assert (fragment.what, fragment.profile) == ("fragment", "local")
    assert [(e.line, e.kind, e.text) for e in shell] == [
        (25, "dry-run", "source .venv/bin/activate"),
        (26, "dry-run", "PYTHONPATH=$PWD snakemake --profile profiles/local --directory runs/x"),
        (37, "skip", "cat hosts"),
        (39, "skip", "snakemake --profile profiles/ssh"),
    ]
    assert shell[-1].reason == "needs two hosts"


def test_a_failing_example_is_found(tmp_path: Path):
    """A run that failed, skipped a run of the example, left one out, or submitted a job fails
    its check; one that did none of these passes."""
    example = Example("p.md", 3, "dry-run", "config", "runs: [{name: a}]", profile="slurm")
    check = Check(example, "snakemake ...", tmp_path, {}, argv=["-n"], runs=["a"])
    planned = "    output: results/runs/a/model.pt\n"
    assert problems(check, SimpleNamespace(returncode=0, output=planned)) == []
    assert problems(check, SimpleNamespace(returncode=1, output=planned)) == ["exit status 1"]
    skipped = "skipping run 'a': too big\n"
    assert problems(check, SimpleNamespace(returncode=0, output=skipped)) == [
        "skipping run 'a': too big",
        "run 'a' is not planned",
    ]
    (tmp_path / "calls").write_text("sinfo -h\nqsub -w v -pe mpi 2 true\nsbatch --job-name x\n")
    assert problems(check, SimpleNamespace(returncode=0, output=planned)) == [
        "it submitted: sbatch --job-name x"
    ]


def test_every_placeholder_stands_in_an_example_and_each_profile_has_its_command():
    """No stale placeholder; the README prints the command of every profile an example names."""
    texts = [e.text for e in RUNNABLE]
    unused = [p for p in PLACEHOLDERS if not any(re.search(re.escape(p) + _END, t) for t in texts)]
    assert not unused, f"placeholders no example uses: {unused}"
    assert [e.file for e in EXAMPLES if e.file] == [CONFIG_FILE]
    for profile in {e.profile for e in RUNNABLE if e.what != "command"}:
        assert f"--profile profiles/{profile}" in config_command(profile)
