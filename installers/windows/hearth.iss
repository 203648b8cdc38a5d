; Inno Setup script for Hearth on Windows (x64): installs the PyInstaller one-folder bundle (dist\hearth\).
; NOT RUN in this project's CI (Linux). Build the bundle first (installers\windows\build.ps1 does both), then:
;   iscc /DMyAppVersion=0.1.0 installers\windows\hearth.iss
; Needs Inno Setup 6.3 or later (the x64compatible architecture identifier).

#ifndef MyAppVersion
  #define MyAppVersion "0.1.0"
#endif
#ifndef MyVariant
  ; "cpu" or "cuda": which llama-cpp-python build went into the bundle (only the file name differs)
  #define MyVariant "cpu"
#endif
#define MyAppName "Hearth"
#define MyAppExe "hearth.exe"
#define Root "..\.."

[Setup]
AppId={{6F1D8C52-3B7E-4C41-9D0A-5E2B7A9C4F13}
AppName={#MyAppName}
AppVersion={#MyAppVersion}
AppVerName={#MyAppName} {#MyAppVersion}
AppPublisher=Hearth
DefaultDirName={autopf}\{#MyAppName}
DefaultGroupName={#MyAppName}
DisableProgramGroupPage=yes
; Per-user by default (no administrator prompt); the dialog lets a user choose all users instead.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#Root}\dist
OutputBaseFilename=hearth-{#MyAppVersion}-windows-x64-{#MyVariant}-setup
SetupIconFile={#Root}\build\icons\hearth.ico
UninstallDisplayIcon={app}\{#MyAppExe}
UninstallDisplayName={#MyAppName}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
; The optional PATH entry takes effect in new terminals without a sign-out.
ChangesEnvironment=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "addtopath"; Description: "Add the hearth-cli command to PATH"; GroupDescription: "Command line:"; Flags: unchecked

[Files]
; Hearth's own files only: models, chats and settings live in the user's folders and survive an uninstall.
Source: "{#Root}\dist\hearth\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\{#MyAppName}"; Filename: "{app}\{#MyAppExe}"
Name: "{autodesktop}\{#MyAppName}"; Filename: "{app}\{#MyAppExe}"; Tasks: desktopicon

[Registry]
; The per-user PATH (HKCU) gets the install folder, so `hearth-cli hw` works in a new terminal.
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; Tasks: addtopath; Check: NeedsAddPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\{#MyAppExe}"; Description: "{cm:LaunchProgram,{#MyAppName}}"; Flags: nowait postinstall skipifsilent

[Code]
function NeedsAddPath(Dir: string): Boolean;
var
  Current: string;
begin
  if not RegQueryStringValue(HKEY_CURRENT_USER, 'Environment', 'Path', Current) then
    Result := True
  else
    Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Current) + ';') = 0;
end;
