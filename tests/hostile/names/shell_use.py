"""Every way of starting a process through a shell that tests/python/test_no_shell.py must find.

Not imported or run by anything: the test parses it and expects a finding on each line marked
`# SHELL` and on no other line. (tests/hostile/names/ is outside the folders the test audits.)
"""
import asyncio
import os
import os as operating_system
import platform
import subprocess
import subprocess as sp
from os import popen  # SHELL
from subprocess import getoutput  # SHELL

cmd = "ls"
os.system("ls -l " + cmd)  # SHELL
operating_system.system(cmd)  # SHELL
os.popen(cmd).read()  # SHELL
subprocess.run(cmd, shell=True)  # SHELL
subprocess.run(["ls"], shell=1)  # SHELL
sp.check_output("ls -l", text=True)  # SHELL
subprocess.Popen(f"ls {cmd}")  # SHELL
subprocess.call("ls " + cmd)  # SHELL
subprocess.getstatusoutput(cmd)  # SHELL
asyncio.create_subprocess_shell(cmd)  # SHELL
os.execl("/bin/sh", "sh", "-c", cmd)  # SHELL
os.spawnlp(os.P_WAIT, "bash", "bash", "-c", cmd)  # SHELL
subprocess.run(["/bin/sh", "-c", cmd])  # SHELL

# Not shell use: argv lists, shell=False, other modules' system().
subprocess.run(["ls", "-l", cmd], shell=False)
sp.check_output(["ls"], text=True)
subprocess.Popen([cmd])
platform.system()
