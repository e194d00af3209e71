"""The backend contract: hook specifications, the plugin manager and the declarations."""

from .guard import ENV_IMPORT_TIMEOUT, ENV_PROBE_TIMEOUT
from .manager import (
    ENTRY_POINT_GROUP,
    ENV_SELECT,
    PluginManager,
    PluginRecord,
    get_manager,
    hookimpl,
    implemented_hooks,
    set_manager,
)
from .types import (
    API_VERSION,
    ArchModel,
    Availability,
    BackendModule,
    Capabilities,
    CliTool,
    DeviceCodegen,
    Executor,
    GeneratedSource,
    LanguageExtension,
    PassConfigKey,
    PassPipeline,
    Phase,
    Timer,
    check_api_version,
)

__all__ = [
    "API_VERSION", "ENTRY_POINT_GROUP", "ENV_IMPORT_TIMEOUT", "ENV_PROBE_TIMEOUT", "ENV_SELECT",
    "ArchModel", "Availability", "BackendModule", "Capabilities", "CliTool", "DeviceCodegen",
    "Executor", "GeneratedSource", "LanguageExtension", "PassConfigKey", "PassPipeline", "Phase",
    "PluginManager", "PluginRecord", "Timer", "check_api_version", "get_manager", "hookimpl",
    "implemented_hooks", "set_manager",
]
