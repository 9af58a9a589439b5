"""Which family of the example engine runs a checkpoint: config.json's first `architectures`
entry (as vLLM's and hoist's registries choose), else its model_type.

    cfg, model_class = models.family(json.load(open("config.json")))
    engine = model_class(cfg, parallel, dtype, device)   # model_class.LAYOUT: hoist's layout

Families: Qwen3 and Qwen3-MoE (qwen3_tp.py), Mixtral (mixtral_tp.py), GPT-OSS with BF16
experts (gpt_oss_tp.py, hoist's hf layout), DeepSeek-V2 with MLA (deepseek_v2_tp.py); each
module's docstring lists the tensors it binds. The shared layers are in layers.py.

Failure: ValueError naming the architecture or model_type no family takes, or a config key.
Threading: any (pure functions)."""
from deepseek_v2_tp import DeepseekV2Config, DeepseekV2ForCausalLM
from gpt_oss_tp import GptOssConfig, GptOssForCausalLM
from mixtral_tp import MixtralConfig, MixtralForCausalLM
from qwen3_tp import Config as Qwen3Config
from qwen3_tp import Qwen3ForCausalLM

# architecture -> (model_type, config class, model class)
FAMILIES = {
    "Qwen3ForCausalLM": ("qwen3", Qwen3Config, Qwen3ForCausalLM),
    "Qwen3MoeForCausalLM": ("qwen3_moe", Qwen3Config, Qwen3ForCausalLM),
    "MixtralForCausalLM": ("mixtral", MixtralConfig, MixtralForCausalLM),
    "GptOssForCausalLM": ("gpt_oss", GptOssConfig, GptOssForCausalLM),
    "DeepseekV2ForCausalLM": ("deepseek_v2", DeepseekV2Config, DeepseekV2ForCausalLM),
}


def family(config):
    """(parsed config, model class) for a config.json dict."""
    archs = config.get("architectures") or []
    chosen = next((FAMILIES[a] for a in archs[:1] if a in FAMILIES), None)
    if chosen is None:
        chosen = next((f for f in FAMILIES.values() if f[0] == config.get("model_type")), None)
    if chosen is None:
        known = ", ".join(sorted(FAMILIES))
        raise ValueError(f"config.json: architectures {archs} / model_type "
                         f"'{config.get('model_type')}' is none of this example's families "
                         f"({known})")
    return chosen[1](config), chosen[2]
