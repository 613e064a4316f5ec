"""One version for the wheel, the chart and the image it runs.

pyproject.toml's version, Chart.yaml's version and appVersion, the tag
manifests/ sets, and the image the chart renders by default, each read from
its own file: a release that bumps one and not the others fails here.
"""

from __future__ import annotations

import yaml

from testkit.tools.chart import CHART, objects, template
from testkit.tools.versions import ROOT, wheel_version


def test_chart_version_and_app_version_are_the_wheels() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (wheel_version(), wheel_version())


def test_kustomize_install_runs_the_wheels_version() -> None:
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    (image,) = [i for i in kustomization["images"] if i["name"] == "raykueue"]
    assert image["newTag"] == wheel_version()


def test_chart_runs_the_wheels_version_by_default(helm) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Empty: the template takes the appVersion, so there is one place to bump.
    assert values["image"]["tag"] == ""
    deployment = objects(template(helm), from_helm=True)[("Deployment", "raykueue")]
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ctr["image"].rsplit(":", 1)[1] == wheel_version()
