"""What the agent acts in and on: `env` (web, MiniWoB++, Android, sim) and `tasks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class AndroidConfig:
    """Android emulators (one per runner) started from an AVD and reset from its snapshot; see envs/android."""

    sdk_root: str | None = None  # default: $ANDROID_SDK_ROOT, then $ANDROID_HOME
    emulator: str | None = None  # the emulator binary; default: <sdk_root>/emulator/emulator
    avd: str = "rlsys_pixel_28"  # created by the user (README: "Android emulators")
    snapshot: str = "rlsys_home"  # loaded at boot and at every episode's reset
    emulator_args: list[str] = field(default_factory=lambda: ["-gpu", "swiftshader_indirect"])
    emulator_env: dict[str, str] = field(default_factory=dict)  # extra environment for emulator processes
    first_console_port: int = 5554  # emulator i uses console port 5554 + 2i and adb port one above
    max_emulators: int = 16  # per node
    adb_server_port: int = 5037
    console_token_file: str = "~/.emulator_console_auth_token"
    kvm_device: str = "/dev/kvm"  # "" skips the check (e.g. an ARM image under software emulation)
    boot_timeout_s: float = 300.0
    snapshot_timeout_s: float = 60.0
    health_timeout_s: float = 10.0
    devices: list[str] = field(default_factory=list)  # serials of running devices to use instead of starting any
    screenshot_scale: float = 0.5  # observations are downscaled by this factor (1.0: full resolution)
    settle_interval_s: float = (
        0.0  # after an action, extra wait between screenshots (0: back to back) until two are equal
    )
    unicode_input: Literal["adbkeyboard", "none"] = "adbkeyboard"  # how characters beyond ASCII are typed
    swipe_ms: int = 300
    browser_url: str = "https://www.google.com"  # the webshop suites' start page


@dataclass
class SimConfig:
    """`env.kind: sim` (envs/sim.py): an env that only sleeps, imitating a phone's or browser's latency.

    Latencies are lognormal: `median_s * exp(sigma * N(0, 1))` (sigma 0: always the median; 1: p99 about
    10x the median). A step that hangs, or draws a latency beyond `env.step_timeout_s`, waits
    `env.step_timeout_s` and raises EnvBrokenError, like a WebDriver or adb call that timed out."""

    reset_median_s: float = 0.2
    reset_sigma: float = 0.5
    step_median_s: float = 0.1
    step_sigma: float = 0.5
    hang_prob: float = 0.0  # per step
    success_prob: float = 0.1  # per step with a valid action: ends the episode, reward 1
    num_elements: int = 5  # numbered elements in each observation's ui_text
    seed: int = 0  # with the env's id, seeds every draw: same seed and id, same latencies and outcomes


@dataclass
class SynthWebConfig:
    """`env.kind: synthweb` (envs/synthweb.py): how the synthetic site answers actions. What the sites are (depths,
    distractors, impossible tasks) is the task mix, `tasks.synthweb`; docs/synthweb.md says what each key tests."""

    # a link the instruction does not name: "detour" leads to a page whose Back link returns (the step is lost, the
    # episode goes on), "stay" does nothing (one step lost), "end" ends the episode as a failure
    wrong_link: Literal["detour", "stay", "end"] = "detour"
    detour_links: int = 1  # links on a detour page besides Back, each one detour deeper
    back_link: bool = True  # every page but the first shows a Back link (to the page before)
    slip_prob: float = 0.0  # a click or tap lands on an element drawn uniformly from the page instead
    reward_noise: float = 0.0  # standard deviation of Gaussian noise added to the episode's last reward
    image_size: list[int] = field(default_factory=lambda: [160, 210])  # [width, height] of every screenshot
    seed: int = 0  # with the env's id, seeds the slips and the noise: same seed, id and actions, same episodes


@dataclass
class EnvConfig:
    kind: Literal["miniwob", "web", "android", "sim", "synthweb"] = "miniwob"
    action_space: Literal["element", "pae", "coords", "autoui", "cogagent"] = "element"
    max_steps: int = 5
    viewport: list[int] = field(default_factory=lambda: [1024, 768])  # exact pixels of the page area
    set_of_marks: bool = True  # draw numbered element boxes onto the screenshot
    history: int = 3  # previous steps shown in each observation
    step_timeout_s: float = 15.0  # every WebDriver or adb call
    settle_quiet_ms: int = 50  # web: no DOM change and no action of the env's for this long...
    settle_timeout_s: float = 3.0  # ...but no longer than this is waited
    wait_action_s: float = 1.0  # what the agent's `Wait` action waits
    headless: bool = True
    chromium: str = "/usr/bin/chromium"
    chromedriver: str = "/usr/bin/chromedriver"
    max_elements: int = 200  # a page of links shows over 100 at 1024x768
    # how ui_text lists the elements: PAE's `[i]: <tag> "text";`, or by accessible role and name with state
    # (`[i] textbox "Search" value "json"`, `[i] checkbox "Remember me" checked`)
    element_list: Literal["pae", "roles"] = "pae"
    # safety (web)
    # web confinement (envs/web/confinement.py): every request is allowed or refused by origin before it is
    # sent. Besides the task's start origin (and the search engine's while these two lists name no origin and no
    # domain): these hosts and their subdomains on the default ports 80/443 (names that resolve to public
    # addresses only)...
    allowed_domains: list[str] = field(default_factory=list)
    # ...these exact origins, `scheme://host[:port]`, on any address (a local service, link-local included),
    # and `scheme:` entries for pages of another scheme than http(s)
    allowed_origins: list[str] = field(default_factory=list)
    allow_all_domains: bool = False  # any host whose addresses are all public; still never a local service
    new_tabs: Literal["follow", "close"] = "follow"
    download_max_mb: float = 20.0
    # cookies and storage are cleared between episodes; the HTTP cache (no session in it) only if this is set
    clear_http_cache: bool = False
    # the env relaunches its browser before an episode once the browser's processes hold more than this much
    # unique memory (MiB, read every 10 episodes; 0: never), or once it has served this many episodes (0: never)
    browser_memory_mb: int = 1536
    browser_max_episodes: int = 0
    # where each browser's throwaway profile (cookies, HTTP cache, storage) lives; "": /dev/shm (in RAM) where it
    # has 1 GiB free, else the system's temp folder
    browser_profile_dir: str = ""
    # where the `Google` action goes (an http(s) URL; "": nowhere); reachable without an allowlist, and with one
    # only if the allowlist names its origin or domain
    search_engine: str = "https://www.google.com/"
    # a self-hosted site (WebArena) reset between episodes: argv, run every `instance_reset_every`
    instance_reset_command: list[str] | None = None
    instance_reset_every: int = 0
    instance_reset_timeout_s: float = 600.0
    # MiniWoB++
    episode_time_limit_s: float = 60.0  # MiniWoB's in-page timer
    max_tabs: int = 8  # task pages kept open per browser
    # the screenshot is the task's 160x210 area drawn this many times as large (2: 320x420 pixels)
    task_area_scale: int = 2
    android: AndroidConfig = field(default_factory=AndroidConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    synthweb: SynthWebConfig = field(default_factory=SynthWebConfig)


@dataclass
class SynthWebTasksConfig:
    """`tasks.suite: synthweb`: the task mix, one synthetic site per task, made from the task's seed alone.

    A task of depth d is solved by d clicks, each on the one link of its page that the instruction names, among
    `distractors` others (drawn per task from [min_distractors, max_distractors]); depth is drawn per task from
    [min_depth, max_depth]. `confusable` is the chance that a distractor shares a word with the right link's text;
    an `impossible` share of tasks lack their last link (no path)."""

    num_tasks: int = 200  # distinct training tasks, drawn again and again
    seed: int = 0  # task i is made from seed `seed * 10_000_000 + i` alone: same seed, same tasks
    min_depth: int = 1
    max_depth: int = 4
    min_distractors: int = 1
    max_distractors: int = 6
    confusable: float = 0.5
    impossible: float = 0.1
    # evaluation plays the training tasks ("train", in order) or as many tasks of the same mix never trained on
    eval_tasks: Literal["train", "heldout"] = "train"


@dataclass
class TasksConfig:
    suite: Literal["miniwob", "webvoyager", "webarena", "aitw-general", "aitw-webshop", "synthweb"] = "miniwob"
    train: list[str] = field(default_factory=lambda: ["click-test-2"])  # MiniWoB++ names, or ["all"]
    eval: list[str] | None = None  # default: the training tasks
    # web suites: a JSONL task file (web_name, id, ques, web[, eval]); AitW: a text file, one instruction per line
    file: str | None = None
    eval_file: str | None = None  # default: `file`
    url_map: dict[str, str] = field(default_factory=dict)  # placeholders such as __SHOPPING__ -> base URL
    sampling: Literal["random", "sequential"] = "random"
    synthweb: SynthWebTasksConfig = field(default_factory=SynthWebTasksConfig)
