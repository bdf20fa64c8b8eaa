"""The feature views: :class:`FeatureDashboard` (module :mod:`.widget`) and :class:`PromptFeatures` (:mod:`.prompt`);
their compact trait data: :mod:`.data`."""

from circuitwidgets.widgets.features.prompt import PromptFeatures
from circuitwidgets.widgets.features.widget import FeatureDashboard

__all__ = ["FeatureDashboard", "PromptFeatures"]
