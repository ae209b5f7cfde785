"""The documentation site builds, renders in a browser, and has no broken link.

docs/ is built once for this module (Sphinx + myst-nb, ``-W``: warnings are
errors; every code cell of the guides executes, and a cell that raises fails
the build), into a temporary directory. Then:

* the index, the search page and the search index exist, and every page has
  the navigation sidebar;
* every internal link and image of the built HTML resolves (a file that
  exists, and an ``id`` for a ``#fragment``); sphinx's linkcheck covers only
  external links;
* headless Chromium (Debian package ``chromium``) opens the index and one
  how-to page, renders them (the DOM after scripts ran has the page title and
  the navigation) and takes a screenshot (``docs/_build/screenshots/``).
  Without a Chromium binary the browser test is skipped and says so; .ci/run
  installs the package where it can.
"""

import html.parser
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = os.path.join(ROOT, "docs")
SHOTS = os.path.join(DOCS, "_build", "screenshots")
HOWTO = "how-to/dpsgd_balls_in_bins.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  out = tmp_path_factory.mktemp("docs_html")
  # as on a user's machine: none of the test session's JAX cache settings (the
  # worker's own cache folder), and a fresh jaxacct cache folder shared by the
  # pages' kernels (a program one page compiled is loaded by the next)
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "JAXACCT_"))}
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  env["JAXACCT_COMPILATION_CACHE"] = "1"
  env["JAXACCT_CACHE_DIR"] = str(tmp_path_factory.mktemp("docs_cache"))
  env["JAXACCT_PROGRESS"] = "0"
  t0 = time.perf_counter()
  for attempt in (1, 2):
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path_factory.mktemp("docs_doctrees")), DOCS, str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    why = "" if proc.returncode == 0 else _why(proc.stderr)
    # a page's kernel that died (a crash, as the suite reruns a crashed worker once,
    # pyproject.toml) is built again once, saying so; a cell's error never is
    if attempt == 1 and "DeadKernelError" in why:
      print(f"docs build: a kernel died, building again:\n{why[-3000:]}")
      continue
    break
  seconds = time.perf_counter() - t0
  assert proc.returncode == 0, f"docs build failed (exit {proc.returncode}):\n{why}"
  print(f"docs build: {seconds:.1f} s")
  return str(out)


def _why(stderr: str) -> str:
  """What a failed build said, less the kernels' start-up chatter, and the
  traceback sphinx saved to a file (a cell's error and its source are there,
  not on stderr)."""
  lines = [ln for ln in stderr.splitlines() if "IPKernelApp" not in ln]
  said = "\n".join(lines)[-6000:]
  saved = re.findall(r"(/\S*sphinx-err-\S+\.log)", stderr)
  for path in saved[-1:]:
    try:
      with open(path, encoding="utf-8", errors="replace") as f:
        said += f"\n--- {path} (the end) ---\n" + f.read()[-12000:]
    except OSError as err:
      said += f"\n(could not read {path}: {err})"
  return said


def _pages(site):
  for dirpath, _, files in os.walk(site):
    if "_static" in dirpath.split(os.sep) or "_sources" in dirpath.split(os.sep):
      continue
    for f in files:
      if f.endswith(".html"):
        yield os.path.join(dirpath, f)


class _Links(html.parser.HTMLParser):

  def __init__(self):
    super().__init__()
    self.links, self.ids, self.classes = [], set(), set()

  def handle_starttag(self, tag, attrs):
    a = dict(attrs)
    if "id" in a:
      self.ids.add(a["id"])
    if "name" in a and tag == "a":
      self.ids.add(a["name"])
    self.classes.update((a.get("class") or "").split())
    for key in ("href", "src"):
      if a.get(key) and not (tag == "link" and a.get("rel") in ("preconnect", "canonical")):
        self.links.append(a[key])


def _parse(path):
  p = _Links()
  with open(path, encoding="utf-8") as f:
    p.feed(f.read())
  return p


def test_index_search_and_navigation(site):
  for name in ("index.html", "search.html", "searchindex.js", "genindex.html", HOWTO,
               "api/index.html", "bounds/index.html", "changelog.html", "benchmarks.html"):
    assert os.path.exists(os.path.join(site, name)), name
  index = open(os.path.join(site, "searchindex.js"), encoding="utf-8").read()
  for word in ("allocation", "calibrate", "shuffle"):
    assert word in index, word
  for page in ("index.html", HOWTO, "api/dpsgd.html"):
    parsed = _parse(os.path.join(site, page))
    assert "bd-sidebar-primary" in parsed.classes, f"{page}: no navigation sidebar"
  nav = _parse(os.path.join(site, "index.html")).links
  for target in ("getting_started.html", HOWTO, "api/index.html", "benchmarks.html"):
    assert any(link.split("#")[0] == target for link in nav), target


def test_executed_pages_show_their_output(site):
  text = open(os.path.join(site, "getting_started.html"), encoding="utf-8").read()
  assert "balls_in_bins" in text and "cell_output" in text
  assert "Traceback" not in text


def test_no_broken_internal_link(site):
  parsed = {p: _parse(p) for p in _pages(site)}
  broken = []
  for page, p in parsed.items():
    for link in p.links:
      url = urllib.parse.urlparse(link)
      if url.scheme or link.startswith(("//", "mailto:", "javascript:", "data:")):
        continue
      path = urllib.parse.unquote(url.path)
      target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
      if os.path.isdir(target):
        target = os.path.join(target, "index.html")
      if not os.path.exists(target):
        broken.append(f"{os.path.relpath(page, site)} -> {link}")
        continue
      if url.fragment and target.endswith(".html"):
        ids = parsed[target].ids if target in parsed else _parse(target).ids
        if url.fragment not in ids:
          broken.append(f"{os.path.relpath(page, site)} -> {link} (no id)")
  assert len(parsed) >= 30, len(parsed)
  assert not broken, "\n".join(broken[:50])


def _chromium():
  for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
    path = shutil.which(name)
    if path:
      return path
  return None


@pytest.mark.parametrize("page", ["index.html", HOWTO])
def test_page_renders_in_headless_chromium(site, page, tmp_path):
  browser = _chromium()
  if browser is None:
    pytest.skip("no Chromium binary on PATH (Debian: apt-get install chromium; "
                ".ci/run installs it where apt-get and root are available)")
  url = "file://" + os.path.join(site, page)
  common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars"]
  dom = subprocess.run(common + ["--virtual-time-budget=5000", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
  assert dom.returncode == 0, dom.stderr[-2000:]
  assert "jaxacct" in dom.stdout and "bd-sidebar-primary" in dom.stdout, dom.stdout[:2000]
  os.makedirs(SHOTS, exist_ok=True)
  shot = os.path.join(SHOTS, page.replace("/", "_").replace(".html", ".png"))
  if os.path.exists(shot):
    os.remove(shot)
  run = subprocess.run(common + ["--window-size=1280,900", "--virtual-time-budget=5000",
                                 f"--screenshot={shot}", url],
                       capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert os.path.getsize(shot) > 20_000, "screenshot is (nearly) blank"
  with open(shot, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
