# Build Hearth's Windows installer: a venv with llama-cpp-python (CPU, or CUDA with -Cuda), the PyInstaller
# bundle in dist\hearth\, then Inno Setup's compiler over installers\windows\hearth.iss.
# NOT RUN in this project's CI (Linux). Needs Python 3.11+, and Inno Setup 6.3+ (iscc.exe on PATH or in its
# default folder). Run from the repository root in PowerShell:
#   powershell -ExecutionPolicy Bypass -File installers\windows\build.ps1            # CPU build
#   powershell -ExecutionPolicy Bypass -File installers\windows\build.ps1 -Cuda cu124 # NVIDIA GPUs (CUDA 12.4)
param(
    [string]$Cuda = "",        # a llama-cpp-python wheel index tag: cu121, cu122, cu123, cu124, ...
    [string]$Python = "py -3.11"
)
$ErrorActionPreference = "Stop"
$Root = Resolve-Path "$PSScriptRoot\..\.."
Set-Location $Root
$Version = (Select-String -Path app\__init__.py -Pattern '__version__ = "(.+)"').Matches[0].Groups[1].Value

if (-not (Test-Path .venv\Scripts\python.exe)) { Invoke-Expression "$Python -m venv .venv" }
$Py = ".venv\Scripts\python.exe"
# llama-cpp-python's own prebuilt wheels (no compiler needed): CPU, or CUDA for the tag given.
$Variant = if ($Cuda) { "cuda" } else { "cpu" }
$Index = if ($Cuda) { "https://abetlen.github.io/llama-cpp-python/whl/$Cuda" } else { "https://abetlen.github.io/llama-cpp-python/whl/cpu" }
& $Py -m pip install --prefer-binary --extra-index-url $Index llama-cpp-python
& $Py -m pip install -e ".[bundle]"

$env:QT_QPA_PLATFORM = "offscreen"
& $Py installers\icons\render_icons.py --out build\icons
Remove-Item Env:\QT_QPA_PLATFORM
# With -Cuda, PyInstaller collects the CUDA runtime DLLs llama.dll links (cudart, cublas) from PATH: install the
# CUDA toolkit of that version first, or copy those DLLs into dist\hearth\_internal\llama_cpp\lib afterwards.
& $Py -m PyInstaller --noconfirm --distpath dist --workpath build\pyinstaller installers\hearth.spec
& $Py installers\bundle_check.py --bundle dist\hearth

$Iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
if (-not $Iscc) { $Iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
& $Iscc "/DMyAppVersion=$Version" "/DMyVariant=$Variant" installers\windows\hearth.iss
Write-Host "built dist\hearth-$Version-windows-x64-$Variant-setup.exe"
