# Slipway agent bootstrap for ${OS}/${ARCH}. The server fills in ACCESS_URL and AUTH_TYPE.
#
# The same steps as the unix script: run the agent with $env:SLIPWAY_AGENT_PYTHON when that interpreter has it;
# otherwise download the agent bundle from the server, verify it, install it offline into a private virtualenv
# (reused while the bundle does not change) and run the agent from there. The agent token is passed on untouched
# and never printed.

# No global $ErrorActionPreference = 'Stop': Windows PowerShell 5.1 would then turn any line a native command
# writes to stderr (pip's warnings, say) into a terminating error. Failures are checked one by one instead.
# Invoke-WebRequest's progress bar slows downloads down many times over.
$ProgressPreference = 'SilentlyContinue'

$accessUrl = '${ACCESS_URL}'
$authType = '${AUTH_TYPE}'
$platform = '${OS}-${ARCH}'

function Stop-Bootstrap([string]$message) {
    [Console]::Error.WriteLine("slipway-agent: $message")
    exit 1
}

if ($authType -ne 'token') { Stop-Bootstrap "auth type '$authType' is not supported: use auth = `"token`" in coder_agent" }
$env:SLIPWAY_AGENT_URL = $accessUrl

# -P (Python 3.11+): an agent folder in the working directory is neither taken for the agent nor shadows it.
if ($env:SLIPWAY_AGENT_PYTHON) {
    & $env:SLIPWAY_AGENT_PYTHON -P -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(''agent.__main__'') is None)' 2>$null
    if ($LASTEXITCODE -eq 0) {
        & $env:SLIPWAY_AGENT_PYTHON -P -m agent
        exit $LASTEXITCODE
    }
    Write-Host "slipway-agent: $env:SLIPWAY_AGENT_PYTHON cannot import the agent; downloading it instead"
}

# The Python launcher first (as py -3), then python and python3 on PATH.
$candidates = @('py', 'python', 'python3')
function Invoke-Python([string]$name, [string[]]$arguments) {
    if ($name -eq 'py') { & py -3 @arguments } else { & $name @arguments }
}
function Get-PythonVersion([string]$name) {
    if (-not (Get-Command $name -ErrorAction SilentlyContinue)) { return $null }
    $version = Invoke-Python $name @('-c', 'import sys; print(''%d.%d'' % sys.version_info[:2])') 2>$null
    if ($LASTEXITCODE -ne 0) { return $null }
    return "$version".Trim()
}

$home_ = if ($env:SLIPWAY_AGENT_HOME) { $env:SLIPWAY_AGENT_HOME } else { Join-Path $env:LOCALAPPDATA 'slipway-agent' }
New-Item -ItemType Directory -Force -Path $home_ -ErrorAction Stop | Out-Null
$archive = Join-Path $home_ "download.$PID.tar.gz"
$unpacked = Join-Path $home_ "bundle.$PID"
$url = "${accessUrl}bin/slipway-agent-$platform.tar.gz"

# Verify what tar would write before it writes anything, then every file against SHA256SUMS.
function Expand-Bundle {
    if (Test-Path $unpacked) { Remove-Item -Recurse -Force $unpacked }
    $names = & tar -tzf $archive
    if ($LASTEXITCODE -ne 0) { throw 'the download is not a complete .tar.gz' }
    foreach ($name in $names) {
        $parts = $name.TrimEnd('/').Split('/')
        if ($parts[0] -ne 'slipway-agent' -or $parts -contains '..' -or $name.Contains('\') -or $name.Contains(':')) {
            throw "unexpected entry $name"
        }
    }
    New-Item -ItemType Directory -Path $unpacked -ErrorAction Stop | Out-Null
    & tar -xzf $archive -C $unpacked --strip-components 1
    if ($LASTEXITCODE -ne 0) { throw 'tar could not unpack it' }
    $sums = Join-Path $unpacked 'SHA256SUMS'
    $listed = 0
    foreach ($line in Get-Content -ErrorAction Stop $sums) {
        $digest, $name = $line -split '  ', 2
        $file = Join-Path $unpacked $name
        if (-not (Test-Path -PathType Leaf $file)) { throw "$name is missing" }
        if ((Get-FileHash -Algorithm SHA256 $file).Hash.ToLower() -ne $digest) { throw "$name does not match its checksum" }
        $listed++
    }
    $present = (Get-ChildItem -Recurse -File $unpacked).Count - 1
    if ($present -ne $listed) { throw 'it holds files SHA256SUMS does not list' }
    return (Get-FileHash -Algorithm SHA256 $sums).Hash.ToLower().Substring(0, 16)
}

Write-Host "slipway-agent: downloading $url"
while ($true) {
    try {
        Invoke-WebRequest -UseBasicParsing -Uri $url -OutFile $archive -ErrorAction Stop
        $digest = Expand-Bundle
        break
    } catch {
        Write-Host "slipway-agent: could not download ${url}: $($_.Exception.Message); retrying in 5 s"
        Start-Sleep -Seconds 5
    }
}

$versions = (Get-Content (Join-Path $unpacked 'python-versions.txt') -Raw).Trim().Split(' ')
$python = $null
foreach ($candidate in $candidates) {
    $version = Get-PythonVersion $candidate
    if ($version -and $versions -contains $version) { $python = $candidate; break }
}
if (-not $python) { Stop-Bootstrap "the agent needs Python $($versions -join ', ') (py -3, python or python3)" }

$venv = Join-Path $home_ "venv-$digest-py$version"
$venvPython = Join-Path $venv 'Scripts\python.exe'
if (-not ((Test-Path (Join-Path $venv '.complete')) -and (Test-Path $venvPython))) {
    Write-Host "slipway-agent: installing the agent into $venv (Python $version, offline)"
    $staging = "$venv.tmp.$PID"
    Invoke-Python $python @('-m', 'venv', $staging)
    if ($LASTEXITCODE -ne 0) { Stop-Bootstrap "could not create a virtualenv with $python" }
    $stagingPython = Join-Path $staging 'Scripts\python.exe'
    # --isolated: the workspace's PIP_* variables and pip.ini must not send pip elsewhere than the bundle.
    & $stagingPython -m pip --isolated install --quiet --disable-pip-version-check --no-input --no-cache-dir `
        --no-index --only-binary=:all: --find-links (Join-Path $unpacked 'wheels') `
        --requirement (Join-Path $unpacked 'requirements.txt')
    if ($LASTEXITCODE -ne 0) { Stop-Bootstrap "installing the agent's dependencies from the bundle failed" }
    $purelib = & $stagingPython -c 'import sysconfig; print(sysconfig.get_path(''purelib''))'
    foreach ($package in 'agent', 'protocol') {  # the agent and the protocol package it shares with the server
        Copy-Item -Recurse -ErrorAction Stop (Join-Path $unpacked $package) (Join-Path "$purelib".Trim() $package)
    }
    New-Item -ItemType File (Join-Path $staging '.complete') | Out-Null
    if (Test-Path $venv) { Remove-Item -Recurse -Force $venv }
    Move-Item -ErrorAction Stop $staging $venv
}

Remove-Item -Recurse -Force $unpacked, $archive -ErrorAction SilentlyContinue
Write-Host 'slipway-agent: starting the agent'
# -I: the workspace's PYTHONPATH or a folder named agent in the working directory must not shadow the bundle.
& $venvPython -I -m agent
exit $LASTEXITCODE
