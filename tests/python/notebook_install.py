"""Runs docs/notebook.md's install commands as written, in a temporary home, and starts the
Jupyter kernel they register: it must import `cohort` from the environment they made (and
PyTorch, where Debian's is installed).

    /usr/bin/python3 tests/python/notebook_install.py

Each block follows a line `<!-- tests/python/notebook_install.py runs this block: NAME -->`:
  debian  the commands for Debian 12's own Python (a venv with --system-site-packages);
          `sudo apt-get install` is not run: the packages it names must be installed already
          (else the case is skipped, saying which)
  own     the commands for a conda or pyenv environment, run with `python3` first on PATH
          being a virtual environment of /usr/bin/python3 that apt does not manage (what a
          conda or pyenv environment is to pip), with pip's build isolation off
Both run from a copy of the clone's python/ (pip builds in the source tree), with HOME a
temporary directory (so `~/.venvs/...` and `--user` land there) and nothing downloaded
(PIP_NO_INDEX). Needs /usr/bin/python3 with venv, ipykernel, jupyter_client and setuptools
(Debian: python3-venv, python3-ipykernel, python3-setuptools).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(SOURCE, "docs", "notebook.md")
MARK = "<!-- tests/python/notebook_install.py runs this block: %s -->"


def block(name):
    """The commands of the fenced block after the mark `name`, one a line."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    at = text.find(MARK % name)
    if at < 0:
        raise AssertionError("docs/notebook.md has no block marked '%s'" % name)
    found = re.match(r"\s*```sh\n(.*?)\n```", text[at + len(MARK % name):], re.S)
    if not found:
        raise AssertionError("the mark '%s' is not followed by a ```sh block" % name)
    return [line for line in found.group(1).splitlines() if line.strip()]


def missing_debian_packages(command):
    words = command.split()
    names = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return [n for n in names
            if subprocess.run(["dpkg-query", "-W", "-f=${Status}", n], capture_output=True,
                              universal_newlines=True).stdout != "install ok installed"]


class InstallAsDocumented(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-sdk-doc-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.home = os.path.join(self.tmp, "home")
        self.clone = os.path.join(self.tmp, "clone")
        os.makedirs(self.home)
        shutil.copytree(os.path.join(SOURCE, "python"), os.path.join(self.clone, "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        self.env = dict(os.environ, HOME=self.home, PIP_NO_INDEX="1",
                        PIP_DISABLE_PIP_VERSION_CHECK="1")
        for name in ("PYTHONPATH", "JUPYTER_PATH", "JUPYTER_DATA_DIR", "VIRTUAL_ENV"):
            self.env.pop(name, None)

    def run_commands(self, commands):
        for command in commands:
            done = subprocess.run(["/bin/sh", "-c", command], cwd=self.clone, env=self.env,
                                  capture_output=True, universal_newlines=True)
            self.assertEqual(done.returncode, 0, "%s\n%s%s" % (command, done.stdout, done.stderr))

    def kernel_answers(self, name):
        """Starts the registered kernel `name` as Jupyter does; what its code printed."""
        spec = os.path.join(self.home, ".local", "share", "jupyter", "kernels", name,
                            "kernel.json")
        self.assertTrue(os.path.exists(spec), "no kernel '%s' registered in %s" % (name, spec))
        code = ("import sys, cohort\n"
                "try:\n    import torch\n    has_torch = torch.__version__\n"
                "except ImportError:\n    has_torch = None\n"
                "print(__import__('json').dumps({'prefix': sys.prefix, "
                "'cohort': cohort.__file__, 'torch': has_torch}))\n")
        program = (
            "import json, sys\n"
            "from jupyter_client.manager import start_new_kernel\n"
            "km, kc = start_new_kernel(kernel_name=%r)\n"
            "out = []\n"
            "try:\n"
            "    kc.execute_interactive(%r, timeout=120, output_hook=lambda m: out.append(m))\n"
            "finally:\n"
            "    kc.stop_channels(); km.shutdown_kernel(now=True)\n"
            "text = ''.join(m['content'].get('text', '') for m in out\n"
            "               if m['msg_type'] == 'stream')\n"
            "errors = [m['content'] for m in out if m['msg_type'] == 'error']\n"
            "print(json.dumps({'text': text, 'errors': errors}))\n" % (name, code))
        done = subprocess.run(["/usr/bin/python3", "-c", program], env=self.env,
                              capture_output=True, universal_newlines=True, timeout=180)
        self.assertEqual(done.returncode, 0, done.stderr)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertEqual(answer["errors"], [], answer)
        return json.loads(answer["text"].strip().splitlines()[-1])

    def test_debian_venv_with_system_site_packages_and_a_kernel(self):
        commands = block("debian")
        apt = [c for c in commands if c.startswith("sudo apt-get install")]
        self.assertEqual(len(apt), 1, commands)
        missing = missing_debian_packages(apt[0])
        if missing:
            self.skipTest("not installed here: %s (the block's apt-get is not run)"
                          % " ".join(missing))
        # What the doc warns of: apt's Python refuses pip.
        refused = subprocess.run(
            ["/usr/bin/python3", "-m", "pip", "install", "--dry-run", "./python"],
            cwd=self.clone, env=self.env, capture_output=True, universal_newlines=True)
        if "externally-managed-environment" not in refused.stderr:
            print("note: /usr/bin/python3 is not marked externally managed here", file=sys.stderr)
        self.run_commands([c for c in commands if c not in apt])
        venv = os.path.join(self.home, ".venvs", "cohort")
        got = self.kernel_answers("cohort")
        self.assertEqual(os.path.realpath(got["prefix"]), os.path.realpath(venv), got)
        self.assertTrue(got["cohort"].startswith(os.path.join(venv, "lib")), got)
        has_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                   capture_output=True).returncode == 0
        if has_torch:
            self.assertIsNotNone(got["torch"], "Debian's PyTorch is not seen from the venv")

    def test_own_environment_conda_or_pyenv(self):
        own = os.path.join(self.tmp, "own")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", own],
                       check=True)
        self.env["PATH"] = os.path.join(own, "bin") + ":" + self.env.get("PATH", "/usr/bin:/bin")
        self.env["VIRTUAL_ENV"] = own
        self.env["PIP_NO_BUILD_ISOLATION"] = "0"  # pip's spelling of "no build isolation"
        self.run_commands(block("own"))
        got = self.kernel_answers("cohort")
        self.assertEqual(os.path.realpath(got["prefix"]), os.path.realpath(own), got)
        self.assertTrue(got["cohort"].startswith(os.path.join(own, "lib")), got)


if __name__ == "__main__":
    unittest.main()
