import os
import unittest
from unittest import mock

import client
import config


class ConfigTest(unittest.TestCase):
    def test_key_from_environment(self):
        with mock.patch.dict(os.environ, {"SERVICE_KEY": "abc"}):
            self.assertEqual(config.api_key(), "abc")
            self.assertEqual(client.headers()["Authorization"], "Bearer abc")

    def test_unset_is_empty(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(config.api_key(), "")
